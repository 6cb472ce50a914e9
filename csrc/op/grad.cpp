#include "op/grad.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>  // Node, which torch 2.11's autograd.h leaves incomplete

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <unordered_set>

#include "op/results.h"

namespace ms_aten {
namespace {

// The keys a kernel that differentiates an op is registered under (has_autograd_kernel).
constexpr c10::DispatchKey kAutogradKeys[] = {
    c10::DispatchKey::Autograd, c10::DispatchKey::AutogradCPU, c10::DispatchKey::AutogradCUDA,
    c10::DispatchKey::AutogradOther, c10::DispatchKey::CompositeImplicitAutograd};

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

// The counts m(-1) .. m(order) of grad.h, from one launch's m(order) inputs and m(order-1)
// outputs: counts[j + 1] = m(j).
std::vector<size_t> chain_counts(int order, size_t n_inputs, size_t n_outputs) {
  std::vector<size_t> counts(order + 2);
  counts[order + 1] = n_inputs;
  counts[order] = n_outputs;
  for (int i = order - 1; i >= 0; --i) {
    if (counts[i + 2] < counts[i + 1]) {
      throw std::invalid_argument(c10::str("got ", n_inputs, " inputs and ", n_outputs,
                                           " outputs, which does not fit an order-", order,
                                           " backward"));
    }
    counts[i] = counts[i + 2] - counts[i + 1];
  }
  return counts;
}

// The results of the order-`order` function of the chain on `leaves` (its m(order) inputs):
// the forward op for order 0, else the VJP of the order-(order-1) function. With create_graph,
// autograd records them, so that the next order up can differentiate them again.
std::vector<at::Tensor> evaluate(const OpCall& call, const std::vector<size_t>& counts, int order,
                                 const std::vector<at::Tensor>& leaves, bool create_graph) {
  if (order == 0) {
    auto stack = call.stack(leaves, {});
    call.op().callBoxed(stack);
    auto results = returned_tensors(stack);
    if (!has_autograd_kernel(call.op()) && reaches_autograd_fallback(results)) {
      throw std::runtime_error(no_derivative(call.name()));
    }
    if (results.size() != counts[0]) {
      throw std::runtime_error(c10::str("the forward returned ", results.size(),
                                        " outputs, but the backward got ", counts[0],
                                        " output gradients"));
    }
    return results;
  }
  // leaves = the previous function's inputs, then one gradient per its output.
  const std::vector<at::Tensor> inner(leaves.begin(), leaves.begin() + counts[order]);
  std::vector<at::Tensor> wrt;
  std::vector<size_t> wrt_index;
  for (size_t i = 0; i < inner.size(); ++i) {
    if (inner[i].requires_grad()) {
      wrt.push_back(inner[i]);
      wrt_index.push_back(i);
    }
  }
  std::vector<at::Tensor> results(inner.size());
  if (!wrt.empty()) {
    const auto outputs = evaluate(call, counts, order - 1, inner, /*create_graph=*/true);
    std::vector<at::Tensor> diff_outputs;
    std::vector<at::Tensor> diff_grads;
    for (size_t j = 0; j < outputs.size(); ++j) {
      // Outputs autograd did not record are constants here (an integer output, or a gradient
      // that is zero whatever the inputs, as floor's).
      if (outputs[j].requires_grad()) {
        diff_outputs.push_back(outputs[j]);
        diff_grads.push_back(leaves[inner.size() + j]);
      }
    }
    // Integer and bool outputs pass no gradient, as in torch (argmax, searchsorted): their
    // inputs get zeros. A floating output that autograd did not record has no derivative.
    const bool floating = std::any_of(outputs.begin(), outputs.end(), [](const at::Tensor& t) {
      return at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type());
    });
    if (diff_outputs.empty() && order == 1 && floating) {
      throw std::runtime_error(
          "not differentiable: torch autograd records no gradient from its outputs to its inputs");
    }
    if (!diff_outputs.empty()) {
      std::vector<at::Tensor> grads;
      try {
        grads = torch::autograd::grad(diff_outputs, wrt, diff_grads, create_graph, create_graph,
                                      /*allow_unused=*/true);
      } catch (const c10::Error& error) {
        if (order == 1) throw;
        // Above order 1 this differentiates torch's own backward formulas, which not every op
        // supports (derivatives "not implemented", once_differentiable functions).
        throw std::runtime_error("torch cannot differentiate " + call.name() +
                                 (order == 2 ? " twice" : " " + std::to_string(order) + " times") +
                                 ": " + error.what_without_backtrace());
      }
      for (size_t k = 0; k < grads.size(); ++k) results[wrt_index[k]] = grads[k];
    }
  }
  // Inputs that get no gradient (integers, unused, refused by torch) get zeros of their dtype.
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].defined()) results[i] = at::zeros_like(inner[i]);
  }
  return results;
}

}  // namespace

bool has_autograd_kernel(const c10::OperatorHandle& op) {
  using c10::DispatchKey;
  return std::any_of(std::begin(kAutogradKeys), std::end(kAutogradKeys),
                     [&](DispatchKey key) { return op.hasKernelForDispatchKey(key); });
}

bool reaches_autograd_fallback(const std::vector<at::Tensor>& roots) {
  // The fallback's node (torch/csrc/autograd/autograd_not_implemented_fallback.cpp); no header
  // declares it, so it is known by name. tests/test_derivatives.py fails if that changes.
  static const std::string kFallback = "torch::autograd::WarnNotImplemented";
  std::vector<torch::autograd::Node*> stack;
  std::unordered_set<torch::autograd::Node*> seen;
  for (const auto& root : roots) {
    if (root.defined() && root.grad_fn()) stack.push_back(root.grad_fn().get());
  }
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (node->name() == kFallback) return true;
    for (const auto& edge : node->next_edges()) {
      if (edge.function) stack.push_back(edge.function.get());
    }
  }
  return false;
}

std::string no_derivative(const std::string& ops) {
  return "torch registers no autograd kernel for " + ops +
         ", which the gradient passes through: torch's autograd fallback would only warn and "
         "pass zeros back. Differentiate without it (a replace= may have put it there), or give "
         "it a derivative (torch.library.register_autograd)";
}

std::string vjp_suffix(int order) {
  if (order == 1) return " (backward)";
  if (order == 2) return " (second-order backward)";
  return " (order-" + std::to_string(order) + " backward)";
}

// The route: re-run the forward op under autograd on views of the saved inputs, then ask
// autograd for the VJP. Recomputing costs one forward, but it covers every op the dispatcher
// can differentiate, with the derivative formulas torch itself uses (explicit *_backward ops
// such as convolution_backward are what autograd calls underneath, so calling them by hand
// would save only the forward, and would need per-op code). Higher orders recompute the chain
// below them with create_graph and differentiate once more.
void run_vjp(const OpCall& call, const std::vector<at::Tensor>& inputs,
             const std::vector<at::Tensor>& outputs) {
  const int order = call.order();
  const auto counts = chain_counts(order, inputs.size(), outputs.size());
  const size_t n_forward_inputs = counts[1];
  c10::AutoGradMode grad_mode(true);

  std::vector<bool> refused(n_forward_inputs, false);  // autograd refuses them (running_mean)
  std::vector<at::Tensor> results;
  while (true) {
    std::vector<at::Tensor> leaves;
    for (size_t i = 0; i < inputs.size(); ++i) {
      at::Tensor leaf = inputs[i].detach();
      const auto type = leaf.scalar_type();
      // Only the first m(order-1) inputs are ever differentiated: each order's function
      // differentiates a prefix of its inputs.
      if (i < outputs.size() && !(i < n_forward_inputs && refused[i]) &&
          (at::isFloatingType(type) || at::isComplexType(type))) {
        leaf.requires_grad_(true);
      }
      leaves.push_back(leaf);
    }
    try {
      results = evaluate(call, counts, order, leaves, /*create_graph=*/false);
      break;
    } catch (const c10::Error& error) {
      // Autograd refuses some floating inputs by name ("... is not differentiable with respect
      // to argument 'running_mean'"); they get zeros, the others are recomputed.
      const int input = refused_input(call, error.what_without_backtrace(), n_forward_inputs);
      if (input < 0 || refused[input]) throw;
      refused[input] = true;
    }
  }
  for (size_t i = 0; i < results.size(); ++i) copy_into_output(outputs[i], results[i], i);
}

}  // namespace ms_aten
