// A value-dependent op (nonzero, unique, masked_select, x[mask]) in GRAPH mode, where MindSpore
// sizes every Custom output before the launch: each output is padded to an upper bound that
// torch's fake tensors give (ms_aten/ops/bounded.py), the result goes into its leading corner, and
// a second, int64 output per result holds the result's shape, by which MindSpore's own Slice
// then cuts the result out.
#pragma once

#include <vector>

#include "op/spec.h"

namespace ms_aten {

// outputs: one padded buffer per result of `call`, then one int64 [rank] buffer per result.
void run_bounded(const OpCall& call, const std::vector<at::Tensor>& inputs,
                 const std::vector<at::Tensor>& outputs);

}  // namespace ms_aten
