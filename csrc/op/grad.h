// Vector-Jacobian products of a bridged op, of any order, through torch autograd.
//
// The order-1 VJP of an op f takes f's call-time tensors x, then one gradient g per output of f,
// and returns one gradient per x. The order-k VJP is the VJP of the order-(k-1) one: it takes
// that one's inputs, then one gradient per its output, and returns one gradient per its input.
// So with m(-1) = f's outputs, m(0) = f's inputs and m(j) = m(j-1) + m(j-2), the order-k VJP
// takes m(k) tensors and returns m(k-1); spec.cpp's OpCall::input_count solves the same counts.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "op/spec.h"

namespace ms_aten {

// inputs: m(k) tensors as above; outputs: m(k-1) gradient buffers, k = call.order().
void run_vjp(const OpCall& call, const std::vector<at::Tensor>& inputs,
             const std::vector<at::Tensor>& outputs);

// Whether torch differentiates `op` itself: a kernel of its own for an Autograd key (ATen's
// derivatives, torch.library.register_autograd) or a CompositeImplicitAutograd one, which
// decomposes into ops that have theirs.
bool has_autograd_kernel(const c10::OperatorHandle& op);

// Whether a backward from `roots` would pass through torch's autograd fallback: an op without
// an autograd kernel whose kernel recorded no history of its own either (oneDNN's mkldnn::
// inference ops; a library op whose Python kernel runs torch ops does record one). torch then
// only warns and passes zeros back: a silently wrong gradient, which the VJPs refuse
// (no_derivative).
bool reaches_autograd_fallback(const std::vector<at::Tensor>& roots);

// The refusal: "torch registers no autograd kernel for <ops>, ..." (`ops`: the ops, and where
// they are).
std::string no_derivative(const std::string& ops);

// " (backward)", " (second-order backward)", " (order-3 backward)": a VJP kernel's name suffix.
std::string vjp_suffix(int order);

}  // namespace ms_aten
