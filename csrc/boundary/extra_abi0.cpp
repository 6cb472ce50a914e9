// The only translation unit that touches MindSpore's AotExtra. Built with
// -D_GLIBCXX_USE_CXX11_ABI=0 (setup.py) and without any torch header.
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "boundary/bridge_abi.h"

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
constexpr const char* kSiteAttr = "ms_aten_uid";

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

// An inference's output shapes, as the torch side reports them through ms_aten_emit_fn.
struct Shapes {
  std::vector<std::vector<int64_t>> shapes;

  static void emit(void* context, int ndim, const int64_t* dims, const char* /*dtype*/) {
    static_cast<Shapes*>(context)->shapes.emplace_back(dims, dims + ndim);
  }
};

// MindSpore's shape hook catches std::exception and shows its what(); it runs at compile time
// and, in a graph with unknown sizes, before each launch. The spec and the site (the op
// object's id) come from the primitive's attributes, through AotExtra's std::string interface.
std::vector<std::vector<int64_t>> all_shapes(int* ndims, int64_t** shapes,
                                             mindspore::AotExtra* extra) {
  if (extra == nullptr || !extra->HasAttr(kSpecAttr)) {
    throw std::runtime_error(
        "ms_aten: the Custom op has no 'ms_aten_spec' attribute; build it with ms_aten.op()");
  }
  const std::string spec = extra->GetAttrStr(kSpecAttr);
  const int64_t site = extra->HasAttr(kSiteAttr) ? extra->GetAttrInt(kSiteAttr) : -1;
  Shapes result;
  char error[4096];
  if (ms_aten_infer_shapes(spec.c_str(), site, ndims, shapes, &Shapes::emit, &result, error,
                           sizeof error) != 0) {
    throw std::runtime_error(error);
  }
  return std::move(result.shapes);
}

std::vector<int64_t> single_shape(int* ndims, int64_t** shapes, mindspore::AotExtra* extra) {
  auto result = all_shapes(ndims, shapes, extra);
  if (result.size() != 1) {
    throw std::runtime_error("ms_aten: the op has " + std::to_string(result.size()) +
                             " outputs, but its primitive is marked single-output");
  }
  return std::move(result[0]);
}

using SingleShape = std::vector<int64_t>;
using MultiShape = std::vector<std::vector<int64_t>>;

}  // namespace

// Every kernel entry point (entry.cpp) gets MindSpore's hooks under its name:
//   <func>Init        once per kernel, before its first launch
//   <func>InferShape  output shapes from input shapes (ops.Custom's C++ route, taken when
//                     out_shape is None); one shape per output for a multi_output op
// MindSpore takes the shapes back as std::vector values, whose layout is the same under both
// C++ ABIs (std::string's is not: none crosses). There is no <func>InferType: a C++ type hook
// returns a bare TypeId, which MindSpore turns into a scalar, not a tensor, for a rank-0 output;
// dtypes come from Python (ms_aten/ops/infer.py), which asks this library too.
#define MS_ATEN_HOOKS(func, Shape, infer)                                                          \
  MS_ATEN_C_API int func##Init(int*, int64_t**, const char**, void* extra) {                       \
    return init_kernel(extra);                                                                     \
  }                                                                                                \
  MS_ATEN_C_API Shape func##InferShape(int* ndims, int64_t** shapes, mindspore::AotExtra* extra) { \
    return infer(ndims, shapes, extra);                                                            \
  }

extern "C" {

MS_ATEN_HOOKS(MsAtenCall, SingleShape, single_shape)
MS_ATEN_HOOKS(MsAtenCallCuda, SingleShape, single_shape)
MS_ATEN_HOOKS(MsAtenCallNpu, SingleShape, single_shape)
MS_ATEN_HOOKS(MsAtenCallMulti, MultiShape, all_shapes)
MS_ATEN_HOOKS(MsAtenCallCudaMulti, MultiShape, all_shapes)
MS_ATEN_HOOKS(MsAtenCallNpuMulti, MultiShape, all_shapes)

void* ms_aten_extra_kernel(void* extra) {
  auto* aot_extra = static_cast<mindspore::AotExtra*>(extra);
  if (aot_extra == nullptr || aot_extra->kernel_data_ == nullptr) return nullptr;
  return static_cast<KernelHolder*>(aot_extra->kernel_data_)->kernel();
}

}  // extern "C"
