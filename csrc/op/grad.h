// Vector-Jacobian products of a bridged op, of any order, through torch autograd.
//
// The order-1 VJP of an op f takes f's call-time tensors x, then one gradient g per output of f,
// and returns one gradient per x. The order-k VJP is the VJP of the order-(k-1) one: it takes
// that one's inputs, then one gradient per its output, and returns one gradient per its input.
// So with m(-1) = f's outputs, m(0) = f's inputs and m(j) = m(j-1) + m(j-2), the order-k VJP
// takes m(k) tensors and returns m(k-1); spec.cpp's OpCall::input_count solves the same counts.
#pragma once

#include <string>
#include <vector>

#include "op/spec.h"

namespace ms_aten {

// inputs: m(k) tensors as above; outputs: m(k-1) gradient buffers, k = call.order().
void run_vjp(const OpCall& call, const std::vector<at::Tensor>& inputs,
             const std::vector<at::Tensor>& outputs);

// " (backward)", " (second-order backward)", " (order-3 backward)": a VJP kernel's name suffix.
std::string vjp_suffix(int order);

}  // namespace ms_aten
