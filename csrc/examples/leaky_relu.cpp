// A hand-written AOT kernel, the MindSpore tutorial's way: how to write your own kernel when
// you want to. (ms_aten.op("leaky_relu") needs none of this.)
//
//   python -m ms_aten.build csrc/examples/leaky_relu.cpp -o leaky_relu_cpu.so
//   op = ops.Custom("./leaky_relu_cpu.so:LeakyRelu", out_shape=lambda x: x,
//                   out_dtype=lambda x: x, func_type="aot")
#include <string.h>
#include <torch/extension.h>

#include "ms_ext.h"

extern "C" int LeakyRelu(int nparam, void** params, int* ndims, int64_t** shapes,
                         const char** dtypes, void* stream, void* extra) {
  try {
    auto tensors = get_torch_tensors(nparam, params, ndims, shapes, dtypes, c10::kCPU);
    auto at_input = tensors[0];
    auto at_output = tensors[1];
    torch::leaky_relu_out(at_output, at_input);
  } catch (const std::exception& e) {
    // MindSpore shows what() of a std::exception in the Python error; rethrow as one.
    throw std::runtime_error(std::string("LeakyRelu: ") + e.what());
  }
  return 0;
}

// dx = dy where x > 0, else negative_slope * dy; inputs: x, dy; output: dx.
extern "C" int LeakyReluGrad(int nparam, void** params, int* ndims, int64_t** shapes,
                             const char** dtypes, void* stream, void* extra) {
  try {
    auto tensors = get_torch_tensors(nparam, params, ndims, shapes, dtypes, c10::kCPU);
    auto at_input = tensors[0];
    auto at_grad = tensors[1];
    auto at_output = tensors[2];
    torch::leaky_relu_backward_out(at_output, at_grad, at_input, 0.01, false);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("LeakyReluGrad: ") + e.what());
  }
  return 0;
}
