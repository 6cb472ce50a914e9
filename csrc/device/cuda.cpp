// The CUDA backend: ATen on MindSpore's stream, with no device synchronization.
#include "device/device.h"

#ifdef WITH_CUDA

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <stdexcept>

namespace ms_aten {

bool built_with_cuda() { return true; }

void run_on_cuda(void* stream, int nparam, void** params,
                 const std::function<void(c10::Device)>& body) {
  int device_index = -1;
  for (int i = 0; i < nparam; ++i) {
    if (params[i] == nullptr) continue;  // zero-size tensors may have no buffer
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, params[i]) != cudaSuccess ||
        attributes.type != cudaMemoryTypeDevice) {
      cudaGetLastError();
      throw std::runtime_error(c10::str("buffer ", i, " at ", params[i],
                                        " is not CUDA device memory, but this is the GPU kernel"));
    }
    if (device_index >= 0 && attributes.device != device_index) {
      throw std::runtime_error(c10::str("buffers live on GPUs ", device_index, " and ",
                                        attributes.device, "; one kernel runs on one device"));
    }
    device_index = attributes.device;
  }
  if (device_index < 0) C10_CUDA_CHECK(cudaGetDevice(&device_index));
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  c10::cuda::CUDAGuard device_guard(device);
  // ATen's kernels, and its caching allocator's temporaries, go on the stream MindSpore
  // ordered this kernel on; nothing waits for the device here.
  c10::cuda::CUDAStreamGuard stream_guard(
      c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), device.index()));
  body(device);
}

}  // namespace ms_aten

#else

#include <stdexcept>

namespace ms_aten {

bool built_with_cuda() { return false; }

void run_on_cuda(void*, int, void**, const std::function<void(c10::Device)>&) {
  throw std::runtime_error(
      "ms_aten was built without CUDA support (its torch had no CUDA when it was installed); "
      "run the op on CPU with op.set_device('CPU'), or reinstall ms_aten with a CUDA torch");
}

}  // namespace ms_aten

#endif
