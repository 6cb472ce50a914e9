// The at::Tensor views of one kernel's buffers, kept from one launch to the next.
//
// Wrapping a buffer (at::from_blob, plus the host-memory check on CPU: an msync system call)
// costs about half a microsecond, a large part of a small op's launch. A compiled GRAPH hands
// each kernel the same buffers at every step, so a launch reuses the previous launch's views
// while every pointer, shape, dtype and the device match.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ms_aten {

class ViewCache {
 public:
  // One view per buffer (inputs, then outputs): the cached views when they describe exactly
  // these buffers, else fresh ones, checked to be host memory on CPU (device.h), which replace
  // the cached ones. A launch that finds the cache in use by another thread wraps its own.
  std::vector<at::Tensor> views(int nparam, void** params, const int* ndims,
                                int64_t* const* shapes, const char** dtypes, c10::Device device);

  // Forgets the views: an ATen kernel resized or re-pointed one of them.
  void clear();

 private:
  struct Buffer {
    void* data;
    std::vector<int64_t> sizes;
    std::string dtype;
  };
  bool matches(int nparam, void** params, const int* ndims, int64_t* const* shapes,
               const char** dtypes, c10::Device device) const;

  std::mutex mutex_;
  c10::Device device_{c10::kCPU};
  std::vector<Buffer> buffers_;
  std::vector<at::Tensor> views_;
};

}  // namespace ms_aten
