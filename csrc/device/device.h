// Where MindSpore's buffers live, and running ATen there.
//
// Each backend has its own unit: cpu.cpp always, cuda.cpp and npu.cpp with real code only when
// the build defines WITH_CUDA / WITH_NPU (setup.py does so when torch has CUDA, or torch_npu is
// importable); otherwise they raise a clear "built without ... support" error instead of
// crashing.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <vector>

namespace ms_aten {

// Throws std::runtime_error unless every non-empty buffer is memory the CPU can read and write
// (a device pointer handed to the CPU kernel would otherwise crash the process).
void check_host_buffers(const std::vector<at::Tensor>& tensors);
// The same for one buffer, `index` naming it in the error.
void check_host_buffer(const at::Tensor& tensor, size_t index);

// Runs body(device) with ATen on the CUDA device that owns params[0] and on MindSpore's
// stream, after checking that every buffer is device memory of that device.
void run_on_cuda(void* stream, int nparam, void** params,
                 const std::function<void(c10::Device)>& body);

// The same for Ascend NPUs through torch_npu.
void run_on_npu(void* stream, int nparam, void** params,
                const std::function<void(c10::Device)>& body);

bool built_with_cuda();
bool built_with_npu();

}  // namespace ms_aten
