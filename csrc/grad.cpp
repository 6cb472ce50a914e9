#include "grad.h"

#include <torch/csrc/autograd/autograd.h>

#include <stdexcept>

#include "kernel.h"

namespace ms_aten {
// The route: re-run the forward op under autograd on views of the saved inputs, then ask
// autograd for the VJP. Recomputing costs one forward, but it covers every op the dispatcher
// can differentiate, with the derivative formulas torch itself uses (explicit *_backward ops
// such as convolution_backward are what autograd calls underneath, so calling them by hand
// would save only the forward, and would need per-op code).
void run_vjp(const OpCall& call, const std::vector<at::Tensor>& inputs,
             const std::vector<at::Tensor>& outputs) {
  const size_t n_in = outputs.size();
  c10::AutoGradMode grad_mode(true);

  std::vector<at::Tensor> leaves;
  std::vector<at::Tensor> wrt;
  std::vector<size_t> wrt_index;
  for (size_t i = 0; i < n_in; ++i) {
    at::Tensor leaf = inputs[i].detach();
    if (at::isFloatingType(leaf.scalar_type()) || at::isComplexType(leaf.scalar_type())) {
      leaf.requires_grad_(true);
      wrt.push_back(leaf);
      wrt_index.push_back(i);
    }
    leaves.push_back(leaf);
  }
  for (const auto& out : outputs) out.zero_();  // inputs that get no gradient get zeros
  if (wrt.empty()) return;

  auto stack = call.stack(leaves, {});
  call.op().callBoxed(stack);
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
