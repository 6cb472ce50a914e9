// The only translation unit that touches MindSpore's AotExtra. Built with
// -D_GLIBCXX_USE_CXX11_ABI=0 (setup.py) and without any torch header.
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "bridge_abi.h"

namespace mindspore {

// These two classes reproduce the layout of MindSpore 2.10's AotKernelData and AotExtra
// (include/mindspore/ccsrc/utils/custom_aot_extra.h): the same virtual functions in the same
// order and the same data members. The real header drags in MindSpore's IR headers, and its
// attribute getters are private, so the bridge declares the layout it relies on here.
class AotKernelData {
 public:
  AotKernelData() = default;
  virtual ~AotKernelData() = default;
};

class AotExtra {
 public:
  virtual ~AotExtra() = default;
  virtual bool HasAttr(std::string name) = 0;
  virtual bool GetAttrBool(std::string name) = 0;
  virtual int64_t GetAttrInt(std::string name) = 0;
  virtual float GetAttrFloat(std::string name) = 0;
  virtual std::string GetAttrStr(std::string name) = 0;
  virtual std::vector<int64_t> GetAttrIntVec(std::string name) = 0;
  virtual std::vector<float> GetAttrFloatVec(std::string name) = 0;
  virtual std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) = 0;
  virtual std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) = 0;

  std::vector<size_t> workspace_;
  AotKernelData* kernel_data_{nullptr};
};

}  // namespace mindspore

namespace {

constexpr const char* kSpecAttr = "ms_aten_spec";

// Owns the torch-side kernel; MindSpore deletes it through AotExtra::DestructKernelData.
class KernelHolder final : public mindspore::AotKernelData {
 public:
  explicit KernelHolder(void* kernel) : kernel_(kernel) {}
  ~KernelHolder() override { ms_aten_kernel_destroy(kernel_); }
  void* kernel() const { return kernel_; }

 private:
  void* kernel_;
};

void* create_kernel(mindspore::AotExtra* extra) {
  try {
    if (!extra->HasAttr(kSpecAttr)) {
      return ms_aten_kernel_create(
          nullptr, "the Custom op has no 'ms_aten_spec' attribute; build it with ms_aten.op()");
    }
    const std::string spec = extra->GetAttrStr(kSpecAttr);
    return ms_aten_kernel_create(spec.c_str(), nullptr);
  } catch (const std::exception& e) {
    return ms_aten_kernel_create(nullptr, e.what());
  } catch (...) {
    return ms_aten_kernel_create(nullptr, "unknown exception while reading 'ms_aten_spec'");
  }
}

// MindSpore calls <func>Init once per kernel, before the first launch; every backend's entry
// point (entry.cpp) shares it.
int init_kernel(void* extra) {
  auto* aot_extra = static_cast<mindspore::AotExtra*>(extra);
  if (aot_extra == nullptr) return 0;  // the launch reports the missing state
  try {
    delete aot_extra->kernel_data_;  // Init may run again for the same kernel
    aot_extra->kernel_data_ = nullptr;
    aot_extra->kernel_data_ = new KernelHolder(create_kernel(aot_extra));
  } catch (...) {
    aot_extra->kernel_data_ = nullptr;  // only `new` can throw here; the launch reports it
  }
  return 0;
}

}  // namespace

extern "C" {

MS_ATEN_C_API int MsAtenCallInit(int*, int64_t**, const char**, void* extra) {
  return init_kernel(extra);
}
MS_ATEN_C_API int MsAtenCallCudaInit(int*, int64_t**, const char**, void* extra) {
  return init_kernel(extra);
}
MS_ATEN_C_API int MsAtenCallNpuInit(int*, int64_t**, const char**, void* extra) {
  return init_kernel(extra);
}

void* ms_aten_extra_kernel(void* extra) {
  auto* aot_extra = static_cast<mindspore::AotExtra*>(extra);
  if (aot_extra == nullptr || aot_extra->kernel_data_ == nullptr) return nullptr;
  return static_cast<KernelHolder*>(aot_extra->kernel_data_)->kernel();
}

}  // extern "C"
