// The at::Tensor views of one kernel's buffers, kept from one launch to the next.
//
// Wrapping a buffer (at::from_blob, plus the host-memory check on CPU: an msync system call)
// costs about half a microsecond, a large part of a small op's launch. A compiled GRAPH hands
// each kernel its buffers from a few addresses that recur from step to step (MindSpore's memory
// pool alternates between blocks), so each buffer position keeps the views of its last few
// addresses and reuses one whose pointer, shape and dtype match.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ms_aten {

class ViewCache {
 public:
  // One view per buffer (inputs, then outputs): a cached one where it describes exactly that
  // buffer, else a fresh one, checked to be host memory on CPU (device.h), which is cached in
  // place of the position's oldest. A launch that finds the cache in use by another thread
  // wraps its own.
  std::vector<at::Tensor> views(int nparam, void** params, const int* ndims, int64_t* const* shapes,
                                const char** dtypes, c10::Device device);

  // Forgets the views: an ATen kernel resized or re-pointed one of them.
  void clear();

 private:
  static constexpr size_t kPerPosition = 4;
  struct View {
    void* data = nullptr;
    std::vector<int64_t> sizes;
    std::string dtype;
    at::Tensor tensor;
  };
  struct Position {
    std::array<View, kPerPosition> views;
    size_t next = 0;  // the slot the next fresh view replaces
  };

  std::mutex mutex_;
  c10::Device device_{c10::kCPU};
  std::vector<Position> positions_;
};

}  // namespace ms_aten
