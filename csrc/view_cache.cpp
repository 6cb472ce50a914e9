#include "view_cache.h"

#include <algorithm>
#include <cstring>

#include "device.h"
#include "ms_ext.h"

namespace ms_aten {

bool ViewCache::matches(int nparam, void** params, const int* ndims, int64_t* const* shapes,
                        const char** dtypes, c10::Device device) const {
  if (device != device_ || buffers_.size() != static_cast<size_t>(nparam)) return false;
  for (int i = 0; i < nparam; ++i) {
    const Buffer& buffer = buffers_[i];
    const size_t ndim = static_cast<size_t>(ndims[i]);
    if (buffer.data != params[i] || buffer.sizes.size() != ndim ||
        (ndim > 0 && !std::equal(buffer.sizes.begin(), buffer.sizes.end(), shapes[i])) ||
        buffer.dtype != dtypes[i]) {
      return false;
    }
  }
  return true;
}

std::vector<at::Tensor> ViewCache::views(int nparam, void** params, const int* ndims,
                                         int64_t* const* shapes, const char** dtypes,
                                         c10::Device device) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (lock.owns_lock() && matches(nparam, params, ndims, shapes, dtypes, device)) return views_;
  auto tensors = get_torch_tensors(nparam, params, const_cast<int*>(ndims),
                                   const_cast<int64_t**>(shapes), dtypes, device);
  if (device.is_cpu()) check_host_buffers(tensors);
  if (lock.owns_lock()) {
    buffers_.clear();
    for (int i = 0; i < nparam; ++i) {
      const int64_t* shape = shapes[i];
      buffers_.push_back({params[i], std::vector<int64_t>(shape, shape + (shape ? ndims[i] : 0)),
                          dtypes[i]});
    }
    device_ = device;
    views_ = tensors;
  }
  return tensors;
}

void ViewCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  buffers_.clear();
  views_.clear();
}

}  // namespace ms_aten
