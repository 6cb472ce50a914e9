// Public helper for kernels that MindSpore loads through ops.Custom(func_type="aot").
//
// A kernel receives MindSpore's raw buffers; get_torch_tensors wraps each of them as an
// at::Tensor view (at::from_blob, no copy), so the kernel body can call any ATen `_out` op:
//
//   extern "C" int LeakyRelu(int nparam, void** params, int* ndims, int64_t** shapes,
//                            const char** dtypes, void* stream, void* extra) {
//     auto t = get_torch_tensors(nparam, params, ndims, shapes, dtypes, c10::kCPU);
//     at::leaky_relu_out(t[1], t[0], 0.01);
//     return 0;
//   }
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

// libms_aten.so hides every symbol it does not export on purpose.
#define MS_ATEN_API __attribute__((visibility("default")))

// The ATen dtype for one of the 15 dtype strings MindSpore 2.10 hands to AOT kernels
// ("float32", "bfloat16", "complex64", "uint16", ...). Throws std::invalid_argument for
// any other string: a silently wrong dtype would reinterpret the bytes of the buffer.
MS_ATEN_API at::ScalarType ms_dtype_to_scalar_type(const char* dtype);

// The inverse: MindSpore's name for an ATen dtype, or throws std::invalid_argument.
MS_ATEN_API const char* scalar_type_to_ms_dtype(at::ScalarType dtype);

// One view per parameter, inputs first, then outputs, in MindSpore's order.
// 0-dim tensors arrive with shapes[i] == nullptr and ndims[i] == 0.
MS_ATEN_API std::vector<at::Tensor> get_torch_tensors(int nparam, void** params, int* ndims,
                                                      int64_t** shapes, const char** dtypes,
                                                      c10::Device device);

// A single view; get_torch_tensors calls it for every parameter.
MS_ATEN_API at::Tensor wrap_ms_buffer(void* data, int ndim, const int64_t* shape, const char* dtype,
                                      c10::Device device);
