#include "launch/view_cache.h"

#include <algorithm>

#include "boundary/ms_ext.h"
#include "device/device.h"

namespace ms_aten {
namespace {

bool describes(const std::vector<int64_t>& sizes, const std::string& dtype, int ndim,
               const int64_t* shape, const char* dtype_name) {
  return sizes.size() == static_cast<size_t>(ndim) &&
         (ndim == 0 || std::equal(sizes.begin(), sizes.end(), shape)) && dtype == dtype_name;
}

}  // namespace

std::vector<at::Tensor> ViewCache::views(int nparam, void** params, const int* ndims,
                                         int64_t* const* shapes, const char** dtypes,
                                         c10::Device device) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (lock.owns_lock() && (device != device_ || positions_.size() != static_cast<size_t>(nparam))) {
    positions_.assign(static_cast<size_t>(nparam), Position{});
    device_ = device;
  }
  std::vector<at::Tensor> tensors;
  tensors.reserve(static_cast<size_t>(nparam));
  for (int i = 0; i < nparam; ++i) {
    if (lock.owns_lock()) {
      Position& position = positions_[i];
      const auto matches = [&](const View& v) {
        return v.data == params[i] && describes(v.sizes, v.dtype, ndims[i], shapes[i], dtypes[i]);
      };
      const auto hit = std::find_if(position.views.begin(), position.views.end(), matches);
      if (hit != position.views.end()) {
        tensors.push_back(hit->tensor);
        continue;
      }
    }
    at::Tensor tensor = wrap_ms_buffer(params[i], ndims[i], shapes[i], dtypes[i], device);
    if (device.is_cpu()) check_host_buffer(tensor, static_cast<size_t>(i));
    if (lock.owns_lock()) {
      Position& position = positions_[i];
      const int64_t* shape = shapes[i];
      std::vector<int64_t> sizes(shape, shape + (ndims[i] > 0 ? ndims[i] : 0));
      position.views[position.next] = {params[i], std::move(sizes), dtypes[i], tensor};
      position.next = (position.next + 1) % kPerPosition;
    }
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

void ViewCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  positions_.clear();
}

}  // namespace ms_aten
