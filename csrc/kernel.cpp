#include "kernel.h"

#include <stdexcept>

#include "bridge_abi.h"
#include "grad.h"
#include "ms_ext.h"

namespace ms_aten {

Kernel* Kernel::create(const char* spec, const char* error) noexcept {
  try {
    if (error != nullptr) return new Kernel(nullptr, "ms_aten", error);
    auto call = std::make_unique<OpCall>(spec);
    std::string name = call->name() + (call->kind() == SpecKind::kVjp ? " (backward)" : "");
    return new Kernel(std::move(call), std::move(name), "");
  } catch (const std::exception& e) {
    try {
      return new Kernel(nullptr, "ms_aten", e.what());
    } catch (...) {
      return nullptr;
    }
  } catch (...) {
    return nullptr;
  }
}

void Kernel::launch(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                    c10::Device device) const {
  if (!call_) throw std::runtime_error(error_);
  const int n_in = call_->input_count(nparam);
  if (n_in < 0 || n_in > nparam) {
    throw std::invalid_argument("got " + std::to_string(nparam) +
                                " buffers, which does not fit the op's inputs and outputs");
  }
  auto tensors = get_torch_tensors(nparam, params, ndims, shapes, dtypes, device);
  std::vector<at::Tensor> inputs(tensors.begin(), tensors.begin() + n_in);
  std::vector<at::Tensor> outputs(tensors.begin() + n_in, tensors.end());
  switch (call_->kind()) {
    case SpecKind::kCall: run_call(inputs, outputs); break;
    case SpecKind::kOut: run_out(inputs, outputs); break;
    case SpecKind::kVjp: run_vjp(*call_, inputs, outputs); break;
  }
}

void copy_into_output(const at::Tensor& output, const at::Tensor& result, size_t index) {
  if (result.sizes() != output.sizes() || result.scalar_type() != output.scalar_type()) {
    throw std::runtime_error(c10::str("output ", index, " came out as ",
                                      result.scalar_type(), result.sizes(), ", but MindSpore expects ",
                                      output.scalar_type(), output.sizes()));
  }
  output.copy_(result);
}

void Kernel::run_call(const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& outputs) const {
  c10::InferenceMode guard;
  auto stack = call_->stack(inputs, outputs);
  call_->op().callBoxed(stack);
  std::vector<at::Tensor> results;
  for (const auto& value : stack) {
    if (value.isTensor()) {
      results.push_back(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorVector()) results.push_back(t);
    } else {
      throw std::runtime_error(std::string("returned a ") + value.tagKind() + ", not tensors");
    }
  }
  if (results.size() != outputs.size()) {
    throw std::runtime_error("returned " + std::to_string(results.size()) +
                             " tensors, MindSpore expects " + std::to_string(outputs.size()));
  }
  for (size_t i = 0; i < results.size(); ++i) copy_into_output(outputs[i], results[i], i);
}

void Kernel::run_out(const std::vector<at::Tensor>& inputs,
                     const std::vector<at::Tensor>& outputs) const {
  c10::InferenceMode guard;
  std::vector<std::pair<const void*, std::vector<int64_t>>> before;
  for (const auto& out : outputs) before.emplace_back(out.data_ptr(), out.sizes().vec());
  auto stack = call_->stack(inputs, outputs);
  call_->op().callBoxed(stack);
  // An out= kernel may resize or re-point its output; then it wrote memory MindSpore never sees.
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& out = outputs[i];
    if (out.data_ptr() != before[i].first || out.sizes() != before[i].second ||
        !out.is_contiguous()) {
      throw std::runtime_error(c10::str("the out= kernel resized or re-allocated output ", i,
                                        " from ", c10::IntArrayRef(before[i].second), " to ",
                                        out.sizes(),
                                        ", so its result would not reach MindSpore's buffer"));
    }
  }
}

}  // namespace ms_aten
