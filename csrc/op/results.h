// What one op call gives back: the tensors a boxed call leaves on its stack, and writing one
// of them into MindSpore's output buffer (kernels, VJPs, padded calls and programs share both).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <vector>

namespace ms_aten {

// The tensors a boxed call left on its stack, Tensor[] returns flattened; throws for others.
std::vector<at::Tensor> returned_tensors(const std::vector<c10::IValue>& stack);

// Writes `result` into MindSpore's output buffer after checking that shape and dtype agree
// with what the Python side inferred; copy_ alone would broadcast or cast silently.
void copy_into_output(const at::Tensor& output, const at::Tensor& result, size_t index);

}  // namespace ms_aten
