// The plain-C seam between the two halves of libms_aten.so.
//
// MindSpore's core is built with _GLIBCXX_USE_CXX11_ABI=0 and torch 2.13 with the new ABI, so
// std::string-based MindSpore types (AotExtra) and torch types never meet in one translation
// unit. extra_abi0.cpp (old ABI) talks to MindSpore; everything else (new ABI) talks to ATen;
// they exchange only the C types declared here.
#pragma once

#include <stddef.h>
#include <stdint.h>

// libms_aten.so hides every symbol it does not export on purpose.
#define MS_ATEN_C_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

// Implemented on the torch side (entry.cpp, over launch/kernel.h's Kernel). Never throw.
// Builds the per-kernel state from an op spec; `error`, when not NULL, is kept and raised at
// launch instead, because MindSpore reports a failing Init only as "CreateKernel".
MS_ATEN_C_API void* ms_aten_kernel_create(const char* spec, const char* error);
MS_ATEN_C_API void ms_aten_kernel_destroy(void* kernel);
// Why the kernel's spec could not be decoded, or NULL when it was: lets Python check a spec
// (a whole program's above all) before anything launches.
MS_ATEN_C_API const char* ms_aten_kernel_error(const void* kernel);
// Launches a kernel on CPU buffers (inputs, then outputs). Returns 0, or 1 with the failure's
// message in error[0 .. error_size).
MS_ATEN_C_API int ms_aten_kernel_launch(void* kernel, int nparam, void** params, int* ndims,
                                        int64_t** shapes, const char** dtypes, char* error,
                                        size_t error_size);
// The same for a program's kernels, with the autograd graph a forward keeps for its VJP
// (csrc/program/saved.h): a forward of kind tape stores it into *saved (the caller owns it, and
// frees it with ms_aten_saved_free); a VJP given a non-NULL *saved uses it and sets *saved to
// NULL. Other kernels leave *saved as it is.
MS_ATEN_C_API int ms_aten_kernel_launch_saved(void* kernel, int nparam, void** params, int* ndims,
                                              int64_t** shapes, const char** dtypes, void** saved,
                                              char* error, size_t error_size);
MS_ATEN_C_API void ms_aten_saved_free(void* saved);
// How many graphs program forwards have parked for a VJP that has not taken them yet.
MS_ATEN_C_API int64_t ms_aten_parked_graphs(void);
// 1 if the kernel's launches write through its out= overload, 0 if they take the functional one
// (it has none, or the out= overload proved unsound), -1 for NULL.
MS_ATEN_C_API int ms_aten_kernel_uses_out(const void* kernel);
// The kernel's name for messages ("aten::mm", "aten::mm (backward)"), valid while it lives.
MS_ATEN_C_API const char* ms_aten_kernel_name(const void* kernel);
// 1 if torch differentiates the op `name` (with overload `overload`, "" for the unnamed one)
// itself, 0 if a backward through it would only get torch's autograd fallback (op/grad.h,
// has_autograd_kernel), -1 if the dispatcher knows no such op. Never throws.
MS_ATEN_C_API int ms_aten_op_has_autograd(const char* name, const char* overload);

// Output shapes and dtypes of an op spec, by meta tensors (infer.h). Shapes are MindSpore's:
// -1 for an unknown size, the one-element shape {-2} for an unknown rank; dtypes are MindSpore's
// names ("float32"). Each output is reported through emit(context, ndim, dims, dtype). Returns
// 0; 1 with the failure's message in error[0 .. error_size) (ATen refused the inputs); 2 the
// same when the op cannot know its output shapes before it runs (no meta kernel: nonzero).
// `site` is the op object's ms_aten_uid attribute, or -1.
typedef void (*ms_aten_emit_fn)(void* context, int ndim, const int64_t* dims, const char* dtype);
// Every input known: n tensors by rank, shape and dtype. Notes the dtypes for the site.
MS_ATEN_C_API int ms_aten_infer(const char* spec, int64_t site, int n, const int* ndims,
                                const int64_t* const* shapes, const char* const* dtypes,
                                ms_aten_emit_fn emit, void* context, char* error,
                                size_t error_size);
// MindSpore's shape hook: shapes only, their number unknown; the rest from the site's notes.
// For a program family's spec ("family ..."): the shapes of a capture with dynamic shapes.
MS_ATEN_C_API int ms_aten_infer_shapes(const char* spec, int64_t site, const int* ndims,
                                       const int64_t* const* shapes, ms_aten_emit_fn emit,
                                       void* context, char* error, size_t error_size);

// Implemented on the MindSpore side (extra_abi0.cpp). Never throws.
// The state that MsAtenCallInit attached to MindSpore's AotExtra, or NULL.
MS_ATEN_C_API void* ms_aten_extra_kernel(void* extra);

#ifdef __cplusplus
}
#endif
