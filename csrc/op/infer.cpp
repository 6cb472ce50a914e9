#include "op/infer.h"

#include <ATen/ATen.h>

#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "boundary/ms_ext.h"
#include "op/results.h"
#include "op/spec.h"

namespace ms_aten {
namespace {

// Two placeholder sizes for unknown dims: odd primes, so that no size computed from one can
// equal the same computation on the other by accident; small enough that a rank-6 tensor of
// unknown sizes still has an int64 element count.
constexpr int64_t kPlaceholders[2] = {1031, 1033};
constexpr int kMaxProbeRank = 5;
constexpr size_t kMaxCachedSignatures = 4096;  // per spec; the cache starts over beyond it

struct SpecState {
  std::unique_ptr<OpCall> call;
  std::unordered_map<std::string, std::vector<TensorMeta>> results;  // by signature()
};

std::mutex g_mutex;  // guards g_specs and g_sites; never held while an op runs (its meta
                     // kernel may be Python, which takes the GIL)
std::unordered_map<std::string, std::shared_ptr<SpecState>> g_specs;
// The input dtypes each site was called with (distinct combinations, count included).
std::unordered_map<int64_t, std::vector<std::vector<at::ScalarType>>> g_sites;

// The dtypes of the call whose shape hook comes next on this thread: set by infer_at (Python
// calls it right before MindSpore's hook), used once.
thread_local int64_t t_dtypes_site = -1;
thread_local std::vector<at::ScalarType> t_dtypes;

std::string describe(const std::vector<TensorMeta>& inputs) {
  std::ostringstream text;
  text << "[";
  for (size_t i = 0; i < inputs.size(); ++i) {
    text << (i ? ", " : "") << "[";
    if (inputs[i].rank < 0) text << "-2";
    for (size_t d = 0; d < inputs[i].dims.size(); ++d) text << (d ? ", " : "") << inputs[i].dims[d];
    text << "]";
  }
  text << "]";
  return text.str();
}

std::string signature(const std::vector<TensorMeta>& inputs) {
  std::string key;
  for (const auto& t : inputs) {
    key.push_back(static_cast<char>(t.dtype));
    key.append(reinterpret_cast<const char*>(&t.rank), sizeof t.rank);
    key.append(reinterpret_cast<const char*>(t.dims.data()), t.dims.size() * sizeof(int64_t));
  }
  return key;
}

std::shared_ptr<SpecState> state_of(const std::string& spec) {
  const std::string call_spec = spec.substr(0, spec.find(';'));
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = g_specs.find(call_spec); it != g_specs.end()) return it->second;
  }
  auto state = std::make_shared<SpecState>();
  state->call = std::make_unique<OpCall>(call_spec);  // throws for a malformed spec
  const SpecKind kind = state->call->kind();
  if (kind == SpecKind::kOut || kind == SpecKind::kInplace || kind == SpecKind::kBounded ||
      kind == SpecKind::kMutate) {
    throw std::invalid_argument(
        "an out=, in-place, bounded or mutate spec has no inference of its own");
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_specs.emplace(call_spec, std::move(state)).first->second;
}

bool is_device(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::DeviceObjType) return true;
  const auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::DeviceObjType;
}

// One meta run on fully known shapes.
std::vector<TensorMeta> run_meta(const OpCall& call, const std::vector<TensorMeta>& inputs) {
  std::vector<at::Tensor> metas;
  for (const auto& t : inputs) {
    metas.push_back(at::empty(t.dims, at::TensorOptions().dtype(t.dtype).device(at::kMeta)));
  }
  c10::InferenceMode guard;
  auto stack = call.stack(metas, {});
  // Factory ops (arange, zeros, ...) would otherwise allocate and fill real memory.
  const auto& arguments = call.op().schema().arguments();
  for (size_t i = 0; i < arguments.size() && i < stack.size(); ++i) {
    if (is_device(arguments[i].type())) stack[i] = c10::Device(at::kMeta);
  }
  call.op().callBoxed(stack);
  std::vector<TensorMeta> outputs;
  for (const at::Tensor& r : returned_tensors(stack)) {
    scalar_type_to_ms_dtype(r.scalar_type());  // throws for a dtype MindSpore lacks
    outputs.push_back({r.dim(), r.sizes().vec(), r.scalar_type()});
  }
  return outputs;
}

// Sets every unknown size to `size`, every unknown rank to `rank` sizes of `size`.
std::vector<TensorMeta> filled(const std::vector<TensorMeta>& inputs, int64_t size, int64_t rank) {
  std::vector<TensorMeta> out = inputs;
  for (auto& t : out) {
    if (t.rank < 0) {
      t.rank = rank;
      t.dims.assign(static_cast<size_t>(rank), size);
    }
    for (auto& d : t.dims) d = d < 0 ? size : d;
  }
  return out;
}

// An error's message. A Python meta kernel's (torch/_meta_registrations.py holds many) arrives
// as "<Python type>: <message>\n\nAt:\n<traceback>"; the traceback is dropped.
std::string message_of(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  if (const size_t at = text.find("\n\nAt:\n"); at != std::string::npos) text.resize(at);
  if (text.rfind("RuntimeError: ", 0) == 0) text.erase(0, 14);
  return text;
}

// Whether the op has no meta kernel (ATen's NotImplementedError, in C++ or in Python).
bool not_implemented(const std::exception& e) {
  return dynamic_cast<const c10::NotImplementedError*>(&e) != nullptr ||
         message_of(e).rfind("NotImplementedError: ", 0) == 0;
}

Unknowable unknowable(const OpCall& call, const std::exception& e) {
  return Unknowable("ms_aten op '" + call.name() +
                    "' cannot run on meta tensors, so its output "
                    "shape is not known before it runs. Ops whose output shape depends on input "
                    "values (nonzero, unique, masked_select) are not supported. (" +
                    message_of(e) + ")");
}

// run_meta, with ATen's errors turned into ours: Unknowable when the op has no meta kernel.
std::vector<TensorMeta> run_checked(const OpCall& call, const std::vector<TensorMeta>& inputs,
                                    const std::vector<TensorMeta>& shown, const char* assumed) {
  const std::string op = "ms_aten op '" + call.name() + "'";
  try {
    return run_meta(call, inputs);
  } catch (const std::exception& e) {
    if (not_implemented(e)) throw unknowable(call, e);
    const std::string why = message_of(e);
    if (assumed == nullptr) throw std::runtime_error(op + ": " + why);
    throw std::runtime_error(op + ": cannot infer its outputs for input shapes " + describe(shown) +
                             " " + assumed + ": " + why);
  }
}

std::vector<TensorMeta> infer_unknown_rank(const OpCall& call,
                                           const std::vector<TensorMeta>& inputs) {
  const std::string op =
      c10::str("ms_aten op '", call.name(), "': cannot infer its outputs for input shapes ",
               describe(inputs), ": ");
  for (const auto& r : call.op().schema().returns()) {
    if (r.type()->kind() == c10::TypeKind::ListType) {
      throw std::runtime_error(op +
                               "it returns a tensor list, whose length may depend on the "
                               "unknown rank (-2)");
    }
  }
  std::string last_error;
  for (int64_t rank = 1; rank <= kMaxProbeRank; ++rank) {
    try {
      auto outputs = run_meta(call, filled(inputs, kPlaceholders[0], rank));
      for (auto& t : outputs) {
        t.rank = -1;
        t.dims.clear();
      }
      return outputs;
    } catch (const std::exception& e) {
      if (not_implemented(e)) throw unknowable(call, e);
      last_error = message_of(e);
    }
  }
  throw std::runtime_error(op + "an input of unknown rank (-2) fits no rank from 1 to " +
                           std::to_string(kMaxProbeRank) + " (at rank " +
                           std::to_string(kMaxProbeRank) + ": " + last_error + ")");
}

std::vector<TensorMeta> infer_unknown_dims(const OpCall& call,
                                           const std::vector<TensorMeta>& inputs) {
  const char* assumed = "with every unknown (-1) size set to 1031";
  auto first = run_checked(call, filled(inputs, kPlaceholders[0], 0), inputs, assumed);
  assumed = "with every unknown (-1) size set to 1033";
  const auto second = run_checked(call, filled(inputs, kPlaceholders[1], 0), inputs, assumed);
  const std::string op = "ms_aten op '" + call.name() + "': for input shapes " + describe(inputs);
  if (first.size() != second.size()) {
    throw std::runtime_error(op + ", its number of outputs depends on the unknown (-1) sizes");
  }
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i].rank != second[i].rank) {
      throw std::runtime_error(op + ", the rank of output " + std::to_string(i) +
                               " depends on the unknown (-1) sizes");
    }
    for (size_t d = 0; d < first[i].dims.size(); ++d) {
      if (first[i].dims[d] != second[i].dims[d]) first[i].dims[d] = -1;
    }
  }
  return first;
}

std::vector<TensorMeta> compute(const OpCall& call, const std::vector<TensorMeta>& inputs) {
  if (call.kind() == SpecKind::kVjp) {  // one gradient per leading input, shaped like it
    const int n_forward = call.vjp_output_count(static_cast<int>(inputs.size()));
    if (n_forward < 0 || n_forward > static_cast<int>(inputs.size())) {
      throw std::runtime_error("ms_aten op '" + call.name() + "' (backward): " +
                               std::to_string(inputs.size()) + " inputs do not fit the op");
    }
    return {inputs.begin(), inputs.begin() + n_forward};
  }
  bool unknown_rank = false, unknown_dims = false;
  for (const auto& t : inputs) {
    unknown_rank = unknown_rank || t.rank < 0;
    for (int64_t d : t.dims) unknown_dims = unknown_dims || d < 0;
  }
  if (unknown_rank) return infer_unknown_rank(call, inputs);
  if (unknown_dims) return infer_unknown_dims(call, inputs);
  return run_checked(call, inputs, inputs, nullptr);
}

void note_site(int64_t site, const std::vector<at::ScalarType>& dtypes) {
  if (site < 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& seen = g_sites[site];
  for (const auto& known : seen) {
    if (known == dtypes) return;
  }
  seen.push_back(dtypes);
}

std::vector<at::ScalarType> dtypes_of(const std::vector<TensorMeta>& inputs) {
  std::vector<at::ScalarType> dtypes;
  for (const auto& t : inputs) dtypes.push_back(t.dtype);
  return dtypes;
}

bool same_shapes(const std::vector<TensorMeta>& a, const std::vector<TensorMeta>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].rank != b[i].rank || a[i].dims != b[i].dims) return false;
  }
  return true;
}

}  // namespace

std::vector<TensorMeta> infer(const std::string& spec, const std::vector<TensorMeta>& inputs) {
  const auto state = state_of(spec);
  const std::string key = signature(inputs);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = state->results.find(key); it != state->results.end()) return it->second;
  }
  auto outputs = compute(*state->call, inputs);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (state->results.size() >= kMaxCachedSignatures) state->results.clear();
  state->results.emplace(key, outputs);
  return outputs;
}

std::vector<TensorMeta> infer_at(const std::string& spec, int64_t site,
                                 const std::vector<TensorMeta>& inputs) {
  auto dtypes = dtypes_of(inputs);
  note_site(site, dtypes);
  t_dtypes_site = site;
  t_dtypes = std::move(dtypes);
  return infer(spec, inputs);
}

// The shape hook cannot know how many shapes MindSpore passed, nor their dtypes. It takes
// them from the Python call right before it on this thread (GRAPH compilation calls
// AtenOp.__check__ before each inference), else from every combination the site was noted
// with (a compiled graph re-infers shapes at run time, on any thread): each is tried, and
// those that fit must agree. Different input counts cannot be told apart safely: an error.
std::vector<TensorMeta> infer_shapes(const std::string& spec, int64_t site, const int* ndims,
                                     const int64_t* const* shapes) {
  std::vector<std::vector<at::ScalarType>> candidates;
  if (t_dtypes_site == site && site >= 0) {
    candidates.push_back(std::move(t_dtypes));
    t_dtypes_site = -1;
  } else {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = g_sites.find(site); it != g_sites.end()) candidates = it->second;
  }
  const auto state = state_of(spec);
  const std::string op = "ms_aten op '" + state->call->name() + "'";
  if (candidates.empty()) {
    throw std::runtime_error(op +
                             ": MindSpore asked for its output shapes, but no call of this "
                             "op object has told ms_aten its input dtypes and count yet");
  }
  for (const auto& c : candidates) {
    if (c.size() != candidates[0].size()) {
      throw std::runtime_error(op +
                               ": this op object is called with different numbers of "
                               "tensors; MindSpore's shape inference does not say which call it "
                               "infers, so use one op object per tensor-list length");
    }
  }
  std::vector<TensorMeta> inputs(candidates[0].size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].rank = ndims[i];
    if (ndims[i] == 1 && shapes[i][0] == -2) {  // MindSpore's unknown rank
      inputs[i].rank = -1;
    } else if (ndims[i] > 0) {
      inputs[i].dims.assign(shapes[i], shapes[i] + ndims[i]);
    }
  }
  std::optional<std::vector<TensorMeta>> agreed;
  std::string first_error;
  for (const auto& dtypes : candidates) {
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i].dtype = dtypes[i];
    std::vector<TensorMeta> outputs;
    try {
      outputs = infer(spec, inputs);
    } catch (const Unknowable&) {
      throw;
    } catch (const std::exception& e) {  // dtypes of another call site may not fit these shapes
      if (first_error.empty()) first_error = e.what();
      continue;
    }
    if (agreed && !same_shapes(*agreed, outputs)) {
      throw std::runtime_error(op + ": its output shapes for input shapes " + describe(inputs) +
                               " depend on the input dtypes, and this op object is called with "
                               "several; MindSpore's shape inference does not pass dtypes, so "
                               "use one op object per input dtype");
    }
    agreed = std::move(outputs);
  }
  if (!agreed) throw std::runtime_error(first_error);
  return *agreed;
}

}  // namespace ms_aten
