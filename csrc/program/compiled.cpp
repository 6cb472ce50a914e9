#include "program/compiled.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner_cpu.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include "op/spec.h"

namespace ms_aten {
namespace {

using Runner = torch::inductor::AOTIModelContainerRunnerCpu;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Model {
  std::string name;
  std::unique_ptr<Runner> inference;
  std::unique_ptr<Runner> forward;
  std::unique_ptr<Runner> backward;
  size_t n_outputs = 0;
  std::vector<bool> differentiates;  // per input
  std::vector<size_t> tangents;
  std::vector<std::pair<bool, size_t>> backward_inputs;  // (a saved tensor?, its index)
  std::vector<size_t> gradients;
  std::vector<size_t> writes;  // ascending: where the `written` buffers go among the inputs
};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

// Models live as long as the process: a graph node's backward may run after its Cell is gone.
std::unordered_map<std::string, std::shared_ptr<const Model>>& registry() {
  static std::unordered_map<std::string, std::shared_ptr<const Model>> models;
  return models;
}

std::shared_ptr<const Model> model_of(const std::string& key) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  const auto it = registry().find(key);
  if (it == registry().end()) {
    throw std::invalid_argument("no compiled model is registered under '" + key + "'");
  }
  return it->second;
}

std::vector<size_t> indices(const std::vector<std::string>& words) {
  std::vector<size_t> out;
  if (words.size() > 1) {
    for (const auto& part : split(words[1], ',')) out.push_back(static_cast<size_t>(to_int(part)));
  }
  return out;
}

std::unique_ptr<Runner> load(const std::string& path) {
  return std::make_unique<Runner>(unescape(path));
}

std::shared_ptr<const Model> parse(const std::string& spec) {
  auto model = std::make_shared<Model>();
  std::vector<size_t> differentiates;
  for (const auto& line : split(spec, '\n')) {
    const auto words = split(line, ' ');
    const std::string& kind = words.at(0);
    if (kind == "name") {
      model->name = unescape(words.at(1));
    } else if (kind == "inference") {
      model->inference = load(words.at(1));
    } else if (kind == "forward") {
      model->forward = load(words.at(1));
      model->n_outputs = static_cast<size_t>(to_int(words.at(2)));
    } else if (kind == "backward") {
      model->backward = load(words.at(1));
    } else if (kind == "differentiates") {
      differentiates = indices(words);
    } else if (kind == "tangents") {
      model->tangents = indices(words);
    } else if (kind == "gradients") {
      model->gradients = indices(words);
    } else if (kind == "writes") {
      model->writes = indices(words);
    } else if (kind == "backward_inputs") {
      for (const auto& part : split(words.at(1), ',')) {
        if (part.empty() || (part[0] != 's' && part[0] != 't')) {
          throw std::invalid_argument("a backward input is s<j> or t<j>, got '" + part + "'");
        }
        model->backward_inputs.emplace_back(part[0] == 's',
                                            static_cast<size_t>(to_int(part.substr(1))));
      }
    } else {
      throw std::invalid_argument("malformed compiled-model line '" + line.substr(0, 200) + "'");
    }
  }
  if (!model->inference && !model->forward) {
    throw std::invalid_argument("a compiled model needs an inference or a forward library");
  }
  if (!model->writes.empty() && !model->inference) {
    throw std::invalid_argument("a compiled model that writes its buffers is an inference one");
  }
  if (static_cast<bool>(model->forward) != static_cast<bool>(model->backward)) {
    throw std::invalid_argument("a forward library needs its backward, and the other way round");
  }
  for (const size_t i : differentiates) {
    if (model->differentiates.size() <= i) model->differentiates.resize(i + 1, false);
    model->differentiates[i] = true;
  }
  return model;
}

// The libraries were compiled for contiguous inputs, as MindSpore's buffers are; a value from
// inside a program (an opaque torch call's result, between compiled pieces) may not be.
std::vector<at::Tensor> contiguous(at::TensorList inputs) {
  std::vector<at::Tensor> args;
  args.reserve(inputs.size());
  for (const at::Tensor& input : inputs) args.push_back(input.contiguous());
  return args;
}

std::vector<at::Tensor> run_inference(const Model& model, at::TensorList inputs) {
  std::vector<at::Tensor> args = contiguous(inputs);
  if (model.inference) return model.inference->run(args);
  std::vector<at::Tensor> results = model.forward->run(args);
  results.resize(model.n_outputs);  // the saved tensors go at once
  return results;
}

// The forward and backward libraries as one autograd node.
struct CompiledFunction : torch::autograd::Function<CompiledFunction> {
  static variable_list forward(AutogradContext* ctx, const std::string& key,
                               at::TensorList inputs) {
    const auto model = model_of(key);
    std::vector<at::Tensor> results = model->forward->run(contiguous(inputs));
    if (results.size() < model->n_outputs) {
      throw std::runtime_error(c10::str("the forward library returned ", results.size(),
                                        " tensors, fewer than the graph's ", model->n_outputs,
                                        " outputs"));
    }
    std::vector<at::Tensor> saved(results.begin() + static_cast<int64_t>(model->n_outputs),
                                  results.end());
    results.resize(model->n_outputs);
    ctx->save_for_backward(saved);
    ctx->saved_data["key"] = key;
    ctx->saved_data["inputs"] = static_cast<int64_t>(inputs.size());
    // The shapes and dtypes of the outputs with gradients, for one that gets none.
    c10::List<std::vector<int64_t>> shapes;
    std::vector<int64_t> dtypes;
    std::vector<bool> has_tangent(results.size(), false);
    for (const size_t k : model->tangents) {
      shapes.push_back(results.at(k).sizes().vec());
      dtypes.push_back(static_cast<int64_t>(results[k].scalar_type()));
      has_tangent[k] = true;
    }
    ctx->saved_data["shapes"] = shapes;
    ctx->saved_data["dtypes"] = dtypes;
    std::vector<at::Tensor> constant;
    for (size_t k = 0; k < results.size(); ++k) {
      if (!has_tangent[k]) constant.push_back(results[k]);
    }
    ctx->mark_non_differentiable(constant);
    return results;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto model = model_of(ctx->saved_data["key"].toStringRef());
    // The compiled backward records nothing: differentiating it would give zeros, silently.
    if (at::GradMode::is_enabled()) {
      throw std::invalid_argument(model->name +
                                  ": a second-order gradient through a compiled program is not "
                                  "supported (its backward is compiled code); capture it without "
                                  "compile= for that");
    }
    const variable_list saved = ctx->get_saved_variables();
    const auto shapes = ctx->saved_data["shapes"].toList();
    const auto dtypes = ctx->saved_data["dtypes"].toIntVector();
    std::vector<at::Tensor> tangents;
    for (size_t j = 0; j < model->tangents.size(); ++j) {
      const at::Tensor& grad = grad_outputs.at(model->tangents[j]);
      // The library was compiled for contiguous gradients; a missing one is zero.
      tangents.push_back(grad.defined() ? grad.contiguous()
                                        : at::zeros(shapes.get(j).toIntVector(),
                                                    at::TensorOptions().dtype(
                                                        static_cast<at::ScalarType>(dtypes[j]))));
    }
    std::vector<at::Tensor> args;
    args.reserve(model->backward_inputs.size());
    for (const auto& [is_saved, index] : model->backward_inputs) {
      args.push_back(is_saved ? saved.at(index) : tangents.at(index));
    }
    const std::vector<at::Tensor> grads = model->backward->run(args);
    if (grads.size() != model->gradients.size()) {
      throw std::runtime_error(c10::str("the backward library returned ", grads.size(),
                                        " gradients, the model expects ", model->gradients.size()));
    }
    // One slot for the key, then one per input.
    variable_list result(1 + static_cast<size_t>(ctx->saved_data["inputs"].toInt()));
    for (size_t g = 0; g < grads.size(); ++g) result.at(1 + model->gradients[g]) = grads[g];
    return result;
  }
};

std::vector<at::Tensor> compiled_cpu(c10::string_view key, at::TensorList inputs) {
  return run_inference(*model_of(std::string(key)), inputs);
}

// The graph's inputs in its own order: each written buffer goes back where the writes line says.
std::vector<at::Tensor> graph_inputs(const Model& model, at::TensorList inputs,
                                     at::TensorList written) {
  if (written.size() != model.writes.size()) {
    throw std::invalid_argument(c10::str(model.name, ": the compiled model writes ",
                                         model.writes.size(), " buffers, the call passes ",
                                         written.size()));
  }
  std::vector<at::Tensor> args;
  args.reserve(inputs.size() + written.size());
  size_t next_input = 0;
  size_t next_written = 0;
  while (args.size() < inputs.size() + written.size()) {
    if (next_written < written.size() && model.writes[next_written] == args.size()) {
      args.push_back(written[next_written++]);
    } else {
      args.push_back(inputs.at(next_input++));
    }
  }
  return args;
}

std::vector<at::Tensor> compiled_writes_cpu(c10::string_view key, at::TensorList inputs,
                                            at::TensorList written) {
  const auto model = model_of(std::string(key));
  return model->inference->run(graph_inputs(*model, inputs, written));
}

std::vector<at::Tensor> compiled_writes_autograd(c10::string_view key, at::TensorList inputs,
                                                 at::TensorList written) {
  if (at::GradMode::is_enabled()) {
    const auto needs_grad = [](const at::Tensor& t) { return t.requires_grad(); };
    if (std::any_of(inputs.begin(), inputs.end(), needs_grad) ||
        std::any_of(written.begin(), written.end(), needs_grad)) {
      throw std::invalid_argument(
          model_of(std::string(key))->name +
          ": compiled for inference, writing its buffers in place (a KV cache): it has no "
          "gradient; capture it without compile= to differentiate it");
    }
  }
  for (const at::Tensor& buffer : written) torch::autograd::increment_version(buffer);
  at::AutoDispatchBelowADInplaceOrView guard;
  return compiled_writes_cpu(key, inputs, written);
}

std::vector<at::Tensor> compiled_autograd(c10::string_view key_view, at::TensorList inputs) {
  const std::string key(key_view);
  const auto model = model_of(key);
  bool differentiated = false;
  if (at::GradMode::is_enabled()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].requires_grad()) continue;
      differentiated = true;
      if (model->backward && (i >= model->differentiates.size() || !model->differentiates[i])) {
        throw std::invalid_argument(
            c10::str(model->name, ": input ", i,
                     " requires grad, but the model was compiled without its gradient"));
      }
    }
  }
  if (!differentiated) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return run_inference(*model, inputs);
  }
  if (!model->backward) {
    throw std::invalid_argument(
        model->name +
        ": compiled for inference only (the module was in eval mode when captured); compile "
        "its backward with compile={\"training\": True}");
  }
  return CompiledFunction::apply(key, inputs);
}

}  // namespace

void register_compiled(const std::string& key, const std::string& spec) {
  auto model = parse(spec);
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[key] = std::move(model);
}

}  // namespace ms_aten

namespace {

// The ops are registered for the life of the process, never deregistered (TORCH_LIBRARY's
// static objects would deregister them at exit, among torch's own static destructors, which
// aborts the process there once the library defines three overloads: an INTERNAL ASSERT on a
// schema already gone). `random` is tagged nondeterministic_seeded, so that a program calling it
// records torch's generator state and a recomputing backward replays it (program.h); `writes`
// is not, even for a random graph: it has no backward, which is what the replay serves.
const bool kRegistered = [] {
  auto* def = new torch::Library(torch::Library::DEF, "ms_aten", std::nullopt, __FILE__, __LINE__);
  def->def("compiled(str key, Tensor[] inputs) -> Tensor[]");
  def->def("compiled.random(str key, Tensor[] inputs) -> Tensor[]",
           {at::Tag::nondeterministic_seeded});
  def->def("compiled.writes(str key, Tensor[] inputs, Tensor(a!)[] written) -> Tensor[]");
  auto* cpu = new torch::Library(torch::Library::IMPL, "ms_aten", c10::DispatchKey::CPU, __FILE__,
                                 __LINE__);
  cpu->impl("compiled", TORCH_FN(ms_aten::compiled_cpu));
  cpu->impl("compiled.random", TORCH_FN(ms_aten::compiled_cpu));
  cpu->impl("compiled.writes", TORCH_FN(ms_aten::compiled_writes_cpu));
  auto* autograd = new torch::Library(torch::Library::IMPL, "ms_aten", c10::DispatchKey::Autograd,
                                      __FILE__, __LINE__);
  autograd->impl("compiled", TORCH_FN(ms_aten::compiled_autograd));
  autograd->impl("compiled.random", TORCH_FN(ms_aten::compiled_autograd));
  autograd->impl("compiled.writes", TORCH_FN(ms_aten::compiled_writes_autograd));
  return true;
}();

}  // namespace
