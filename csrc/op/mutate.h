// An op that writes MindSpore's input buffers in place: torch's fused optimizers
// (_fused_adam_ over every parameter, its moments and its step counts), _foreach_*_ ops, add_.
// The spec's u / U tokens name the written tensors (spec.h): the Python side marks the primitive
// as a side effect, so GRAPH mode keeps it and orders it among the reads and writes of those
// Parameters. MindSpore gives the kernel one placeholder output, which stays unused.
#pragma once

#include <vector>

#include "op/spec.h"

namespace ms_aten {

// inputs: the call-time tensors, views of MindSpore's buffers, which the op writes through.
void run_mutate(const OpCall& call, const std::vector<at::Tensor>& inputs);

}  // namespace ms_aten
