// The extern "C" surface of libms_aten.so: the AOT kernel MindSpore launches, the kernel
// lifetime hooks for extra_abi0.cpp, and the exception barrier.
#include <torch/headeronly/version.h>

#include <stdexcept>
#include <string>

#include "bridge_abi.h"
#include "kernel.h"

namespace {

std::string describe(const std::exception& e) {
  // c10::Error::what() appends a C++ backtrace; users need the message.
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

// MindSpore's CPU AOT launcher catches std::exception and puts what() into the Python
// RuntimeError ("... Error message is <what>"); a non-zero return code would lose the message,
// and anything not derived from std::exception aborts the process. So every failure, whatever
// its type, leaves this function as one std::runtime_error that names the op.
template <class Body>
int barrier(const char* op, Body&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("ms_aten: ") + op + ": " + describe(e));
  } catch (...) {
    throw std::runtime_error(std::string("ms_aten: ") + op + ": unknown C++ exception");
  }
}

}  // namespace

extern "C" {

void* ms_aten_kernel_create(const char* spec, const char* error) {
  return ms_aten::Kernel::create(spec, error);
}

void ms_aten_kernel_destroy(void* kernel) { delete static_cast<ms_aten::Kernel*>(kernel); }

// MindSpore AOT signature. params: inputs then outputs; ndims/shapes/dtypes describe each;
// stream: unused on CPU; extra: MindSpore's AotExtra, holding the kernel state from Init.
MS_ATEN_C_API int MsAtenCall(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
               void* /*stream*/, void* extra) {
  const auto* kernel = static_cast<const ms_aten::Kernel*>(ms_aten_extra_kernel(extra));
  return barrier(kernel ? kernel->name().c_str() : "MsAtenCall", [&] {
    if (kernel == nullptr) {
      throw std::runtime_error("no kernel state: MsAtenCallInit did not run for this op");
    }
    kernel->launch(nparam, params, ndims, shapes, dtypes, c10::kCPU);
  });
}

// "major.minor" of the torch this library was compiled against; ms_aten/_lib.py compares it.
MS_ATEN_C_API const char* ms_aten_torch_version() {
  return C10_STRINGIZE(TORCH_VERSION_MAJOR) "." C10_STRINGIZE(TORCH_VERSION_MINOR);
}

}  // extern "C"
