// The extern "C" surface of libms_aten.so: the AOT kernel MindSpore launches, the kernel
// lifetime hooks for extra_abi0.cpp, and the exception barrier.
#include <torch/headeronly/version.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "boundary/bridge_abi.h"
#include "boundary/ms_ext.h"
#include "device/device.h"
#include "launch/kernel.h"
#include "launch/launch_allocator.h"
#include "launch/launch_thread.h"
#include "op/grad.h"
#include "op/infer.h"
#include "program/compiled.h"
#include "program/family.h"
#include "program/saved.h"

namespace {

std::string describe(const std::exception& e) {
  // c10::Error::what() appends a C++ backtrace; users need the message.
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

// Runs body; returns "" on success, else the failure's message. Catches everything.
template <class Body>
std::string failure_of(const char* op, Body&& body) {
  try {
    body();
    return {};
  } catch (const std::exception& e) {
    return std::string("ms_aten: ") + op + ": " + describe(e);
  } catch (...) {
    return std::string("ms_aten: ") + op + ": unknown C++ exception";
  }
}

const char* kernel_name(const ms_aten::Kernel* kernel) {
  return kernel ? kernel->name().c_str() : "MsAtenCall";
}

const ms_aten::Kernel& checked(const ms_aten::Kernel* kernel) {
  if (kernel == nullptr) {
    throw std::runtime_error("no kernel state: the kernel's Init did not run for this op");
  }
  return *kernel;
}

// MindSpore's AOT launchers catch std::exception (the CPU one puts what() into the Python
// RuntimeError, "... Error message is <what>"; the GPU one logs it); a non-zero return code
// would lose the message, and anything not derived from std::exception aborts the process.
// So every failure, whatever its type, is caught and leaves as one std::runtime_error that
// names the op.
template <class Body>
int barrier(const ms_aten::Kernel* kernel, Body&& body) {
  const std::string error = failure_of(kernel_name(kernel), [&] { body(checked(kernel)); });
  if (!error.empty()) throw std::runtime_error(error);
  return 0;
}

const ms_aten::Kernel* kernel_of(void* extra) {
  return static_cast<const ms_aten::Kernel*>(ms_aten_extra_kernel(extra));
}

void copy_message(const std::string& message, char* error, size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  const size_t n = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

std::vector<ms_aten::TensorMeta> metas_of(int n, const int* ndims, const int64_t* const* shapes,
                                          const char* const* dtypes) {
  std::vector<ms_aten::TensorMeta> inputs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& t = inputs[i];
    t.rank = ndims[i];
    if (ndims[i] == 1 && shapes[i][0] == -2) {  // MindSpore's unknown rank
      t.rank = -1;
    } else if (ndims[i] > 0) {
      t.dims.assign(shapes[i], shapes[i] + ndims[i]);
    }
    if (dtypes != nullptr) t.dtype = ms_dtype_to_scalar_type(dtypes[i]);
  }
  return inputs;
}

bool is_family(const char* spec) { return std::strncmp(spec, "family ", 7) == 0; }

// The output shapes of a program family (a capture with dynamic shapes); dtypes are Python's.
std::vector<ms_aten::TensorMeta> family_shapes(const char* spec, const int* ndims,
                                               const int64_t* const* shapes, bool check) {
  std::vector<ms_aten::TensorMeta> outputs;
  for (auto& dims : ms_aten::ProgramFamily(spec).infer_shapes(ndims, shapes, check)) {
    outputs.push_back({static_cast<int64_t>(dims.size()), std::move(dims)});
  }
  return outputs;
}

// Runs an inference, reports its outputs through emit (an unknown rank as MindSpore's {-2}),
// and turns every failure into a return code and a message: 1, or 2 for ms_aten::Unknowable.
template <class Body>
int infer_barrier(Body&& body, ms_aten_emit_fn emit, void* context, char* error,
                  size_t error_size) {
  try {
    for (const auto& t : body()) {
      static const int64_t kUnknownRank[1] = {-2};
      const bool known = t.rank >= 0;
      emit(context, known ? static_cast<int>(t.rank) : 1, known ? t.dims.data() : kUnknownRank,
           scalar_type_to_ms_dtype(t.dtype));
    }
    return 0;
  } catch (const ms_aten::Unknowable& e) {
    copy_message(e.what(), error, error_size);
    return 2;
  } catch (const std::exception& e) {
    copy_message(describe(e), error, error_size);
  } catch (...) {
    copy_message("ms_aten: unknown C++ exception during inference", error, error_size);
  }
  return 1;
}

}  // namespace

extern "C" {

void* ms_aten_kernel_create(const char* spec, const char* error) {
  return ms_aten::Kernel::create(spec, error);
}

void ms_aten_kernel_destroy(void* kernel) { delete static_cast<ms_aten::Kernel*>(kernel); }

const char* ms_aten_kernel_error(const void* kernel) {
  const auto* k = static_cast<const ms_aten::Kernel*>(kernel);
  if (k == nullptr) return "no kernel";
  return k->error().empty() ? nullptr : k->error().c_str();
}

// MindSpore AOT signatures, one per backend. params: inputs then outputs; ndims/shapes/dtypes
// describe each; stream: the device stream MindSpore ordered the kernel on (unused on CPU);
// extra: MindSpore's AotExtra, holding the kernel state from <name>Init (extra_abi0.cpp).
MS_ATEN_C_API int MsAtenCall(int nparam, void** params, int* ndims, int64_t** shapes,
                             const char** dtypes, void* /*stream*/, void* extra) {
  return barrier(kernel_of(extra), [&](const ms_aten::Kernel& kernel) {
    kernel.launch(nparam, params, ndims, shapes, dtypes, c10::kCPU);
  });
}

MS_ATEN_C_API int MsAtenCallCuda(int nparam, void** params, int* ndims, int64_t** shapes,
                                 const char** dtypes, void* stream, void* extra) {
  return barrier(kernel_of(extra), [&](const ms_aten::Kernel& kernel) {
    ms_aten::run_on_cuda(stream, nparam, params, [&](c10::Device device) {
      kernel.launch(nparam, params, ndims, shapes, dtypes, device);
    });
  });
}

MS_ATEN_C_API int MsAtenCallNpu(int nparam, void** params, int* ndims, int64_t** shapes,
                                const char** dtypes, void* stream, void* extra) {
  return barrier(kernel_of(extra), [&](const ms_aten::Kernel& kernel) {
    ms_aten::run_on_npu(stream, nparam, params, [&](c10::Device device) {
      kernel.launch(nparam, params, ndims, shapes, dtypes, device);
    });
  });
}

// The same launch for callers that cannot catch C++ exceptions (ctypes, other libraries):
// returns 0, or 1 with the message copied into error[0 .. error_size).
MS_ATEN_C_API int ms_aten_kernel_launch(void* kernel, int nparam, void** params, int* ndims,
                                        int64_t** shapes, const char** dtypes, char* error,
                                        size_t error_size) {
  const auto* k = static_cast<const ms_aten::Kernel*>(kernel);
  const std::string message = failure_of(
      kernel_name(k), [&] { checked(k).launch(nparam, params, ndims, shapes, dtypes, c10::kCPU); });
  if (message.empty()) return 0;
  copy_message(message, error, error_size);
  return 1;
}

MS_ATEN_C_API int ms_aten_kernel_launch_saved(void* kernel, int nparam, void** params, int* ndims,
                                              int64_t** shapes, const char** dtypes, void** saved,
                                              char* error, size_t error_size) {
  const auto* k = static_cast<const ms_aten::Kernel*>(kernel);
  std::unique_ptr<ms_aten::SavedGraph> slot(static_cast<ms_aten::SavedGraph*>(*saved));
  *saved = nullptr;
  const std::string message = failure_of(kernel_name(k), [&] {
    checked(k).launch(nparam, params, ndims, shapes, dtypes, c10::kCPU, &slot);
  });
  *saved = slot.release();
  if (message.empty()) return 0;
  copy_message(message, error, error_size);
  return 1;
}

MS_ATEN_C_API void ms_aten_saved_free(void* saved) {
  delete static_cast<ms_aten::SavedGraph*>(saved);
}

MS_ATEN_C_API int64_t ms_aten_parked_graphs() {
  return static_cast<int64_t>(ms_aten::parked_count());
}

MS_ATEN_C_API int ms_aten_op_has_autograd(const char* name, const char* overload) {
  try {
    const auto op = c10::Dispatcher::singleton().findSchema({name, overload});
    if (!op) return -1;
    return ms_aten::has_autograd_kernel(*op) ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

// Multi-output ops get entry points of their own: MindSpore chooses the return type of
// <func>InferShape (one shape, or one per output) by the op's multi_output attribute, and looks
// the hook up by the kernel's name.
MS_ATEN_C_API int MsAtenCallMulti(int nparam, void** params, int* ndims, int64_t** shapes,
                                  const char** dtypes, void* stream, void* extra) {
  return MsAtenCall(nparam, params, ndims, shapes, dtypes, stream, extra);
}

MS_ATEN_C_API int MsAtenCallCudaMulti(int nparam, void** params, int* ndims, int64_t** shapes,
                                      const char** dtypes, void* stream, void* extra) {
  return MsAtenCallCuda(nparam, params, ndims, shapes, dtypes, stream, extra);
}

MS_ATEN_C_API int MsAtenCallNpuMulti(int nparam, void** params, int* ndims, int64_t** shapes,
                                     const char** dtypes, void* stream, void* extra) {
  return MsAtenCallNpu(nparam, params, ndims, shapes, dtypes, stream, extra);
}

int ms_aten_infer(const char* spec, int64_t site, int n, const int* ndims,
                  const int64_t* const* shapes, const char* const* dtypes, ms_aten_emit_fn emit,
                  void* context, char* error, size_t error_size) {
  return infer_barrier(
      [&] { return ms_aten::infer_at(spec, site, metas_of(n, ndims, shapes, dtypes)); }, emit,
      context, error, error_size);
}

int ms_aten_infer_shapes(const char* spec, int64_t site, const int* ndims,
                         const int64_t* const* shapes, ms_aten_emit_fn emit, void* context,
                         char* error, size_t error_size) {
  return infer_barrier(
      [&] {
        // An exception from MindSpore's shape hook while a compiled graph runs leaves that
        // graph unable to run again ("An error occurred in the previous step"), so a program's
        // sizes are checked by its launch, whose errors MindSpore recovers from.
        if (is_family(spec)) return family_shapes(spec, ndims, shapes, /*check=*/false);
        return ms_aten::infer_shapes(spec, site, ndims, shapes);
      },
      emit, context, error, error_size);
}

// A program family's output shapes for Python's __infer__ (ms_aten/programs/runtime/family.py),
// with the sizes checked against their ranges: a bad size fails at the call.
MS_ATEN_C_API int ms_aten_program_shapes(const char* spec, const int* ndims,
                                         const int64_t* const* shapes, ms_aten_emit_fn emit,
                                         void* context, char* error, size_t error_size) {
  return infer_barrier([&] { return family_shapes(spec, ndims, shapes, /*check=*/true); }, emit,
                       context, error, error_size);
}

// Registers the forward and VJP programs captured for one input signature of a program family
// (program/family.h): 0, or 1 with the reason (a spec the library cannot run) in error.
MS_ATEN_C_API int ms_aten_program_register(const char* family, const char* key, const char* call,
                                           const char* vjp, char* error, size_t error_size) {
  const std::string message =
      failure_of("program", [&] { ms_aten::register_programs(family, key, call, vjp); });
  if (message.empty()) return 0;
  copy_message(message, error, error_size);
  return 1;
}

// Drops the programs of a family whose primitive Python freed (program/family.h).
MS_ATEN_C_API void ms_aten_program_forget(const char* family) {
  try {
    ms_aten::forget_programs(family);
  } catch (...) {  // nothing to report: the family is gone or was never there
  }
}

// Registers a model AOTInductor compiled (program/compiled.h) under `key`: 0, or 1 with the
// reason (a malformed spec, a library that does not load) in error.
MS_ATEN_C_API int ms_aten_compiled_register(const char* key, const char* spec, char* error,
                                            size_t error_size) {
  const std::string message =
      failure_of("compiled", [&] { ms_aten::register_compiled(key, spec); });
  if (message.empty()) return 0;
  copy_message(message, error, error_size);
  return 1;
}

MS_ATEN_C_API int ms_aten_kernel_uses_out(const void* kernel) {
  if (kernel == nullptr) return -1;
  return static_cast<const ms_aten::Kernel*>(kernel)->uses_out() ? 1 : 0;
}

MS_ATEN_C_API const char* ms_aten_kernel_name(const void* kernel) {
  return kernel_name(static_cast<const ms_aten::Kernel*>(kernel));
}

MS_ATEN_C_API int64_t ms_aten_launch_count() { return ms_aten::launch_count(); }
MS_ATEN_C_API int64_t ms_aten_host_read_count() { return ms_aten::host_read_count(); }

MS_ATEN_C_API void ms_aten_set_num_threads(int n) { ms_aten::set_num_threads(n); }
MS_ATEN_C_API int ms_aten_get_num_threads() { return ms_aten::num_threads(); }
MS_ATEN_C_API int ms_aten_release_idle_team() { return ms_aten::release_idle_team() ? 1 : 0; }
MS_ATEN_C_API int64_t ms_aten_cached_bytes() { return ms_aten::cached_bytes(); }
MS_ATEN_C_API void ms_aten_empty_cache() { ms_aten::empty_cache(); }

// Whether this build can serve a MindSpore device target ("CPU", "GPU", "Ascend").
MS_ATEN_C_API int ms_aten_supports(const char* target) {
  const std::string name = target ? target : "";
  return name == "CPU" || (name == "GPU" && ms_aten::built_with_cuda()) ||
         (name == "Ascend" && ms_aten::built_with_npu());
}

// "major.minor" of the torch this library was compiled against; ms_aten/native/library.py compares
// it.
MS_ATEN_C_API const char* ms_aten_torch_version() {
  return C10_STRINGIZE(TORCH_VERSION_MAJOR) "." C10_STRINGIZE(TORCH_VERSION_MINOR);
}

}  // extern "C"
