#include "program/family.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <stdexcept>
#include <unordered_map>

#include "op/spec.h"

namespace ms_aten {
namespace {

struct Captured {
  std::shared_ptr<const Program> call;
  std::shared_ptr<const Program> vjp;
  std::shared_ptr<const Program> vjp2;  // the vjp's spec run as its own backward
};

// family id -> signature key -> its programs, until the family's primitive is freed
// (forget_programs): a compiled graph may launch its kernel as long as it holds the primitive,
// and a program is its spec's size (its constants included).
struct Registry {
  std::mutex mutex;
  std::unordered_map<std::string, std::unordered_map<std::string, Captured>> families;
  // Bumped by each registration, so that a kernel's remembered program is found again when a
  // key's programs were replaced.
  std::atomic<uint64_t> generation{0};
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_programs(const std::string& id, const std::string& key, const std::string& call,
                       const std::string& vjp) {
  const std::string vjp_header = "program vjp ";
  if (vjp.rfind(vjp_header, 0) != 0) {
    throw std::invalid_argument("a family's backward spec must start with '" + vjp_header + "'");
  }
  Captured captured{
      std::make_shared<const Program>(call), std::make_shared<const Program>(vjp),
      std::make_shared<const Program>("program vjp2 " + vjp.substr(vjp_header.size()))};
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.families[id][key] = std::move(captured);
  r.generation.fetch_add(1, std::memory_order_release);
}

void forget_programs(const std::string& id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.families.erase(id);
}

std::string signature_key(int count, const int* ndims, const int64_t* const* shapes,
                          const char* const* dtypes) {
  std::string key;
  for (int i = 0; i < count; ++i) {
    if (i > 0) key += ", ";
    key += dtypes[i];
    key += '[';
    for (int d = 0; d < ndims[i]; ++d) {
      if (d > 0) key += ", ";
      key += std::to_string(shapes[i][d]);
    }
    key += ']';
  }
  return key;
}

ProgramFamily::~ProgramFamily() {
  if (last_handle_ != 0) drop(last_handle_);
  if (kernel_id_ != 0) forget_kernel(kernel_id_);
}

void ProgramFamily::run(const Program& program, const std::vector<at::Tensor>& inputs,
                        const std::vector<at::Tensor>& outputs,
                        std::unique_ptr<SavedGraph>* slot) const {
  if (kind_ == "tape") {
    program.run(inputs, outputs, slot ? Program::Keep::kSlot : Program::Keep::kNothing, slot);
    return;
  }
  if (kind_ != "record") {
    program.run(inputs, outputs, Program::Keep::kNothing, slot);
    return;
  }
  bool recording = false;
  {
    std::lock_guard<std::mutex> lock(record_mutex_);
    // A graph still parked from this kernel's last launch was not taken: no backward follows
    // this kernel (MindSpore pruned it), so it stops recording.
    if (last_handle_ != 0 && drop(last_handle_)) recording_ = false;
    last_handle_ = 0;
    // A forward whose backward could not recompute it keeps its graph from the first launch.
    recording = recording_ && (has_backward(kernel_id_) || program.needs_kept_graph());
  }
  const int64_t handle =
      program.run(inputs, outputs, recording ? Program::Keep::kPark : Program::Keep::kNothing);
  // Nothing kept: the VJP, if one follows, recomputes, and learns that it follows this kernel.
  if (handle == 0) outputs.back().fill_(-kernel_id_);
  std::lock_guard<std::mutex> lock(record_mutex_);
  last_handle_ = handle;
}

ProgramFamily::ProgramFamily(const std::string& spec) {
  const auto parts = split(spec, ' ');
  static const char* const kKinds[] = {"call", "record", "tape", "vjp", "vjp2"};
  const bool known = parts.size() == 6 && parts[0] == "family" &&
                     std::find(std::begin(kKinds), std::end(kKinds), parts[1]) != std::end(kKinds);
  if (!known) {
    throw std::invalid_argument(
        "malformed program family spec '" + spec.substr(0, 200) +
        "': expected 'family <call|record|tape|vjp|vjp2> <name> <id> <first> <count>'");
  }
  kind_ = parts[1];
  if (kind_ == "record") kernel_id_ = new_kernel_id();
  name_ = unescape(parts[2]);
  id_ = parts[3];
  first_ = static_cast<int>(to_int(parts[4]));
  count_ = static_cast<int>(to_int(parts[5]));
  if (first_ < 0 || count_ < 0) throw std::invalid_argument("bad input range in '" + spec + "'");
}

std::shared_ptr<const Program> ProgramFamily::find(const std::string& key) const {
  Registry& r = registry();
  std::lock_guard<std::mutex> registry_lock(r.mutex);
  const auto family = r.families.find(id_);
  if (family == r.families.end()) return nullptr;
  auto captured = family->second.find(kAnySignature);
  if (captured == family->second.end()) captured = family->second.find(key);
  if (captured == family->second.end()) return nullptr;
  const Captured& c = captured->second;
  return kind_ == "vjp" ? c.vjp : kind_ == "vjp2" ? c.vjp2 : c.call;
}

std::shared_ptr<const Program> ProgramFamily::select(int nparam, const int* ndims,
                                                     const int64_t* const* shapes,
                                                     const char* const* dtypes) const {
  if (first_ + count_ > nparam) {
    throw std::invalid_argument("got " + std::to_string(nparam) + " buffers, fewer than the " +
                                std::to_string(first_ + count_) + " inputs of the program");
  }
  std::string key = signature_key(count_, ndims + first_, shapes + first_, dtypes + first_);
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t generation = registry().generation.load(std::memory_order_acquire);
  if (last_ && generation == last_generation_ && (key == last_key_ || last_key_ == kAnySignature)) {
    return last_;
  }
  auto program = find(key);
  if (!program) throw std::runtime_error("no program was captured for inputs (" + key + ")");
  last_ = program;
  last_generation_ = generation;
  last_key_ = find(kAnySignature) == program ? kAnySignature : std::move(key);
  return last_;
}

std::vector<std::vector<int64_t>> ProgramFamily::infer_shapes(const int* ndims,
                                                              const int64_t* const* shapes,
                                                              bool check) const {
  const auto program = find(kAnySignature);
  if (!program) {
    throw std::runtime_error("the C++ shape hook serves captures with dynamic shapes only");
  }
  const int n_inputs = program->inputs();
  std::vector<std::vector<int64_t>> input_shapes;
  for (int i = 0; i < n_inputs; ++i) input_shapes.emplace_back(shapes[i], shapes[i] + ndims[i]);
  if (kind_ != "vjp" && kind_ != "vjp2") return program->infer_shapes(input_shapes, check);
  // A backward returns one gradient per input it differentiates (vjp: the program's inputs;
  // vjp2: those and the output gradients), each shaped like it: a prefix of its own inputs.
  const size_t n_results = kind_ == "vjp" ? n_inputs : n_inputs + program->outputs();
  for (size_t i = input_shapes.size(); i < n_results; ++i) {
    input_shapes.emplace_back(shapes[i], shapes[i] + ndims[i]);
  }
  return input_shapes;
}

}  // namespace ms_aten
