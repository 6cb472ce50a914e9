// The CUDA twin of leaky_relu.cpp (build with a CUDA torch: python -m ms_aten.build
// leaky_relu.cu). ATen runs on the stream MindSpore hands in; no device synchronization.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/extension.h>

#include "ms_ext.h"

extern "C" int LeakyRelu(int nparam, void** params, int* ndims, int64_t** shapes,
                         const char** dtypes, void* stream, void* extra) {
  try {
    int device_index = 0;
    cudaGetDevice(&device_index);
    auto device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_index));
    auto ms_stream =
        c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), device.index());
    c10::cuda::CUDAStreamGuard guard(ms_stream);
    auto tensors = get_torch_tensors(nparam, params, ndims, shapes, dtypes, device);
    torch::leaky_relu_out(tensors[1], tensors[0]);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("LeakyRelu: ") + e.what());
  }
  return 0;
}
