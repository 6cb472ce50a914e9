#include "grad.h"

#include <torch/csrc/autograd/autograd.h>

#include <stdexcept>

#include "kernel.h"

namespace ms_aten {
namespace {

// The call-time input named in autograd's "not differentiable with respect to argument 'x'"
// error, or -1.
int refused_input(const OpCall& call, const std::string& message, size_t n_inputs) {
  const std::string marker = "not differentiable with respect to argument '";
  const size_t start = message.find(marker);
  if (start == std::string::npos) return -1;
  const size_t begin = start + marker.size();
  const size_t end = message.find('\'', begin);
  if (end == std::string::npos) return -1;
  return call.input_of_argument(message.substr(begin, end - begin), static_cast<int>(n_inputs));
}

}  // namespace

// The route: re-run the forward op under autograd on views of the saved inputs, then ask
// autograd for the VJP. Recomputing costs one forward, but it covers every op the dispatcher
// can differentiate, with the derivative formulas torch itself uses (explicit *_backward ops
// such as convolution_backward are what autograd calls underneath, so calling them by hand
// would save only the forward, and would need per-op code).
void run_vjp(const OpCall& call, const std::vector<at::Tensor>& inputs,
             const std::vector<at::Tensor>& outputs) {
  const size_t n_in = outputs.size();
  c10::AutoGradMode grad_mode(true);

  for (const auto& out : outputs) out.zero_();  // inputs that get no gradient get zeros
  std::vector<bool> refused(n_in, false);  // inputs torch will not differentiate (running_mean)
  std::vector<at::Tensor> wrt;
  std::vector<size_t> wrt_index;
  std::vector<c10::IValue> stack;
  while (true) {
    std::vector<at::Tensor> leaves;
    wrt.clear();
    wrt_index.clear();
    for (size_t i = 0; i < n_in; ++i) {
      at::Tensor leaf = inputs[i].detach();
      const auto type = leaf.scalar_type();
      if (!refused[i] && (at::isFloatingType(type) || at::isComplexType(type))) {
        leaf.requires_grad_(true);
        wrt.push_back(leaf);
        wrt_index.push_back(i);
      }
      leaves.push_back(leaf);
    }
    if (wrt.empty()) return;
    stack = call.stack(leaves, {});
    try {
      call.op().callBoxed(stack);
      break;
    } catch (const c10::Error& error) {
      // Autograd refuses some floating inputs by name ("... is not differentiable with respect
      // to argument 'running_mean'"); they get zeros, the others are recomputed.
      const int input = refused_input(call, error.what_without_backtrace(), n_in);
      if (input < 0 || refused[input]) throw;
      refused[input] = true;
    }
  }
  const auto results = returned_tensors(stack);
  if (n_in + results.size() != inputs.size()) {
    throw std::runtime_error(c10::str("the forward returned ", results.size(),
                                      " outputs, but the backward got ", inputs.size() - n_in,
                                      " output gradients"));
  }
  std::vector<at::Tensor> diff_outputs;
  std::vector<at::Tensor> diff_grads;
  for (size_t j = 0; j < results.size(); ++j) {
    if (results[j].requires_grad()) {
      diff_outputs.push_back(results[j]);
      diff_grads.push_back(inputs[n_in + j]);
    }
  }
  if (diff_outputs.empty()) {
    throw std::runtime_error(
        "not differentiable: torch autograd records no gradient from its outputs to its inputs");
  }
  const auto grads = torch::autograd::grad(diff_outputs, wrt, diff_grads, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  for (size_t k = 0; k < grads.size(); ++k) {
    if (grads[k].defined()) copy_into_output(outputs[wrt_index[k]], grads[k], wrt_index[k]);
  }
}

}  // namespace ms_aten
