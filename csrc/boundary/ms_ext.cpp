#include "boundary/ms_ext.h"

#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>

#include "boundary/dtype_table.h"

#ifdef WITH_NPU
#include <torch_npu/csrc/aten/common/from_blob.h>
#endif

namespace {

constexpr std::pair<const char*, at::ScalarType> kDtypes[] = {
#define MS_ATEN_DTYPE_ENTRY(name, aten, mindspore) {name, at::ScalarType::aten},
    MS_ATEN_DTYPES(MS_ATEN_DTYPE_ENTRY)
#undef MS_ATEN_DTYPE_ENTRY
};
constexpr int kDtypeCount = static_cast<int>(std::size(kDtypes));

}  // namespace

// The table for ms_aten/native/dtypes.py: entry i's MindSpore name ("float16") and its ATen
// ScalarType's name ("Half"), nullptr past the end.
extern "C" MS_ATEN_API const char* ms_aten_dtype_name(int i) {
  return i >= 0 && i < kDtypeCount ? kDtypes[i].first : nullptr;
}

extern "C" MS_ATEN_API const char* ms_aten_dtype_aten_name(int i) {
  return i >= 0 && i < kDtypeCount ? c10::toString(kDtypes[i].second) : nullptr;
}

at::ScalarType ms_dtype_to_scalar_type(const char* dtype) {
  if (dtype != nullptr) {
    for (const auto& [name, type] : kDtypes) {
      if (std::strcmp(name, dtype) == 0) return type;
    }
  }
  throw std::invalid_argument(std::string("unsupported MindSpore dtype '") +
                              (dtype ? dtype : "<null>") + "'");
}

const char* scalar_type_to_ms_dtype(at::ScalarType dtype) {
  for (const auto& [name, type] : kDtypes) {
    if (type == dtype) return name;
  }
  throw std::invalid_argument(std::string("ATen dtype ") + c10::toString(dtype) +
                              " has no MindSpore equivalent");
}

at::Tensor wrap_ms_buffer(void* data, int ndim, const int64_t* shape, const char* dtype,
                          c10::Device device) {
  const auto options = at::TensorOptions().dtype(ms_dtype_to_scalar_type(dtype)).device(device);
  const auto sizes = ndim == 0 || shape == nullptr
                         ? at::IntArrayRef{}
                         : at::IntArrayRef(shape, static_cast<size_t>(ndim));
#ifdef WITH_NPU
  // NPU memory needs torch_npu's storage; at::from_blob knows only CPU and CUDA. The device is
  // named: without it torch_npu takes its current device.
  if (device.type() == c10::DeviceType::PrivateUse1) {
    return at_npu::native::from_blob(data, sizes, device, options);
  }
#endif
  // The device is named rather than looked up from the pointer (at::from_blob's default): a
  // zero-size tensor has no buffer (nullptr), which CUDA's lookup refuses, and the lookup is a
  // driver call per buffer.
  return at::for_blob(data, sizes).options(options).target_device(device).make_tensor();
}

std::vector<at::Tensor> get_torch_tensors(int nparam, void** params, int* ndims, int64_t** shapes,
                                          const char** dtypes, c10::Device device) {
  std::vector<at::Tensor> tensors;
  tensors.reserve(static_cast<size_t>(nparam));
  for (int i = 0; i < nparam; ++i) {
    tensors.push_back(wrap_ms_buffer(params[i], ndims[i], shapes[i], dtypes[i], device));
  }
  return tensors;
}
