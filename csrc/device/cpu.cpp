#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <stdexcept>

#include "device/device.h"

#ifdef WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ms_aten {
namespace {

// msync fails with ENOMEM for an address that no mapping of this process covers, which is
// where device memory (or a stale pointer) lands; it costs one syscall and touches nothing.
bool is_mapped(const void* address) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  auto* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(address) & ~(page - 1));
  return msync(start, 1, MS_ASYNC) == 0 || errno != ENOMEM;
}

#ifdef WITH_CUDA
// With unified addressing, device memory sits in reserved host ranges that msync accepts.
bool is_cuda_device_memory(const void* address) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, address) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for the next CUDA call
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice;
}
#endif

}  // namespace

void check_host_buffer(const at::Tensor& t, size_t index) {
  if (t.numel() == 0) return;
  const void* data = t.data_ptr();
  bool host = data != nullptr && is_mapped(data);
#ifdef WITH_CUDA
  host = host && !is_cuda_device_memory(data);
#endif
  if (!host) {
    throw std::runtime_error(c10::str("buffer ", index, " at ", data,
                                      " is not host memory, but this is the CPU kernel; is the "
                                      "op's device (op.set_device) the one its tensors live on?"));
  }
}

void check_host_buffers(const std::vector<at::Tensor>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) check_host_buffer(tensors[i], i);
}

}  // namespace ms_aten
