// The vector-Jacobian product of a bridged op, through torch autograd.
#pragma once

#include <vector>

#include "spec.h"

namespace ms_aten {

// inputs: the forward op's call-time tensors, then one gradient per forward output.
// outputs: one gradient buffer per forward call-time tensor.
void run_vjp(const OpCall& call, const std::vector<at::Tensor>& inputs,
             const std::vector<at::Tensor>& outputs);

}  // namespace ms_aten
