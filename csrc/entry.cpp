// The extern "C" surface of libms_aten.so: the AOT kernel MindSpore launches, the kernel
// lifetime hooks for extra_abi0.cpp, and the exception barrier.
#include <torch/headeronly/version.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "bridge_abi.h"
#include "device.h"
#include "kernel.h"

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
  const std::string message = failure_of(kernel_name(k), [&] {
    checked(k).launch(nparam, params, ndims, shapes, dtypes, c10::kCPU);
  });
  if (message.empty()) return 0;
  if (error != nullptr && error_size > 0) {
    const size_t n = std::min(message.size(), error_size - 1);
    std::memcpy(error, message.data(), n);
    error[n] = '\0';
  }
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

MS_ATEN_C_API void ms_aten_set_num_threads(int n) { ms_aten::set_num_threads(n); }
MS_ATEN_C_API int ms_aten_get_num_threads() { return ms_aten::num_threads(); }

// Whether this build can serve a MindSpore device target ("CPU", "GPU", "Ascend").
MS_ATEN_C_API int ms_aten_supports(const char* target) {
  const std::string name = target ? target : "";
  return name == "CPU" || (name == "GPU" && ms_aten::built_with_cuda()) ||
         (name == "Ascend" && ms_aten::built_with_npu());
}

// "major.minor" of the torch this library was compiled against; ms_aten/_lib.py compares it.
MS_ATEN_C_API const char* ms_aten_torch_version() {
  return C10_STRINGIZE(TORCH_VERSION_MAJOR) "." C10_STRINGIZE(TORCH_VERSION_MINOR);
}

}  // extern "C"
