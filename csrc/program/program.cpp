#include "program/program.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "boundary/ms_ext.h"
#include "launch/kernel.h"
#include "op/grad.h"
#include "op/results.h"

namespace ms_aten {
namespace {

[[noreturn]] void fail(const std::string& line, const std::string& why) {
  throw std::invalid_argument("malformed program line '" + line.substr(0, 200) + "': " + why);
}

std::vector<int> ids(const std::string& text) {
  std::vector<int> values;
  for (const auto& part : split(text, ',')) values.push_back(static_cast<int>(to_int(part)));
  return values;
}

// Writes a leaf's gradient into MindSpore's output buffer as soon as AccumulateGrad has stored it
// (autograd runs each leaf's AccumulateGrad once per pass, the gradients that reach it summed),
// then releases it: the gradient lives from its last node to this copy, as in torch eager.
class WriteGradient : public torch::autograd::PostAccumulateGradHook {
 public:
  WriteGradient(at::Tensor out, size_t index, uint8_t* written)
      : out_(std::move(out)), index_(index), written_(written) {}
  void operator()(const torch::autograd::Variable& leaf) override {
    at::Tensor& grad = leaf.mutable_grad();
    // AccumulateGrad calls the hook for an undefined gradient too (a node's None: zero), and
    // the leaf's .grad then stays empty: the buffer is zeroed with those nothing reached.
    if (!grad.defined()) return;
    copy_into_output(out_, grad, index_);
    grad.reset();
    *written_ = 1;
  }

 private:
  at::Tensor out_;
  size_t index_;
  uint8_t* written_;
};

// Removes the hooks from the leaves when the backward ends (or throws): they hold views of
// MindSpore's buffers, which live only as long as the launch.
class GradientWrites {
 public:
  explicit GradientWrites(const std::vector<at::Tensor>& leaves) : leaves_(leaves) {}
  ~GradientWrites() {
    for (const auto& leaf : leaves_) torch::autograd::impl::set_post_acc_grad_hooks(leaf, nullptr);
  }
  GradientWrites(const GradientWrites&) = delete;
  GradientWrites& operator=(const GradientWrites&) = delete;

 private:
  const std::vector<at::Tensor>& leaves_;
};

// A Python number as torch's arg parser passes it to a Tensor argument.
at::Tensor wrapped_number(const std::string& token) {
  const c10::IValue value = constant(token);
  if (!value.isBool() && !value.isInt() && !value.isDouble()) {
    throw std::invalid_argument("a number token must be b0/b1, i<int> or f<float>: " + token);
  }
  at::Tensor tensor = c10::scalar_to_tensor(value.toScalar());
  tensor.unsafeGetTensorImpl()->set_wrapped_number(true);
  return tensor;
}

at::Tensor tensor_constant(const std::string& dtype, const std::string& shape,
                           const std::string& hex) {
  if (shape.empty() || shape[0] != 'I') throw std::invalid_argument("bad shape token " + shape);
  const auto sizes = constant(shape).toIntVector();
  at::Tensor tensor =
      at::empty(sizes, at::TensorOptions().dtype(ms_dtype_to_scalar_type(dtype.c_str())));
  const size_t nbytes = tensor.nbytes();
  if (hex.size() != 2 * nbytes) {
    throw std::invalid_argument("a constant of " + std::to_string(nbytes) + " bytes needs " +
                                std::to_string(2 * nbytes) + " hex digits");
  }
  auto* bytes = static_cast<uint8_t*>(tensor.data_ptr());
  for (size_t i = 0; i < nbytes; ++i) {
    bytes[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return tensor;
}

std::string describe(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

// The default generator of the launch's device: the one its random ops draw from.
at::Generator launch_generator(c10::Device device) {
  return at::globalContext().defaultGenerator(device);
}

// Records the launch device's generator state into the forward's RNG-state output, for a VJP
// that recomputes. The buffer has the CPU state's size (the largest: 5056 bytes, against 16
// for CUDA's seed and offset); a device's state fills its first bytes, the rest zero. On a
// device the state, host memory, goes through pinned memory and a copy that does not wait for
// the stream (a copy from pageable memory would).
void record_rng_state(const at::Tensor& output, size_t index) {
  at::Generator generator = launch_generator(output.device());
  at::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  if (output.is_cpu()) return copy_into_output(output, state, index);
  if (state.numel() > output.numel()) {
    throw std::runtime_error(c10::str("the ", output.device(), " generator's state takes ",
                                      state.numel(), " bytes, the RNG-state output holds ",
                                      output.numel()));
  }
  output.zero_();
  output.narrow(0, 0, state.numel()).copy_(state.pin_memory(), /*non_blocking=*/true);
}

// Puts a recorded generator state of the launch's device in place for the VJP's recompute, and
// restores the current one after: the backward replays the forward's random draws without
// moving torch's stream. One replay at a time; a random op that another thread runs meanwhile
// would draw from the replayed stream (documented in docs/limits.md). On the CPU the state is
// MindSpore's buffer, host memory; on a device it is read back to the host: a host read, which
// waits for the stream (counted: kernel.h, host_read_count).
class RngReplay {
 public:
  explicit RngReplay(const at::Tensor& state)
      : lock_(mutex()), generator_(launch_generator(state.device())) {
    std::lock_guard<std::mutex> generator_lock(generator_.mutex());
    saved_ = generator_.get_state();
    if (state.is_cpu()) {
      generator_.set_state(state.clone());
    } else {
      note_host_read();
      generator_.set_state(state.narrow(0, 0, saved_.numel()).to(at::kCPU));
    }
  }
  ~RngReplay() {
    std::lock_guard<std::mutex> generator_lock(generator_.mutex());
    generator_.set_state(saved_);
  }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  std::lock_guard<std::mutex> lock_;
  at::Generator generator_;
  at::Tensor saved_;
};

// A node's label, or "" for one outside any submodule ("-").
std::string node_label(const std::string& escaped) {
  const std::string label = unescape(escaped);
  return label == "-" ? std::string() : label;
}

// What a boxed call left on its stack: tensors (a Tensor[] flattened) and scalars (.item()).
std::vector<c10::IValue> returned_values(std::vector<c10::IValue>& stack) {
  std::vector<c10::IValue> results;
  for (auto& value : stack) {
    if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorVector()) results.emplace_back(t);
    } else {
      results.push_back(std::move(value));
    }
  }
  return results;
}

int64_t size_value(const c10::IValue& value, const std::string& label) {
  if (!value.isInt()) {
    throw std::runtime_error(label + " is a " + value.tagKind() + ", not a size");
  }
  return value.toInt();
}

}  // namespace

Program::Program(const std::string& spec) {
  const auto lines = split(spec, '\n');
  if (lines.empty()) fail(spec, "empty program");
  const auto header = split(lines[0], ' ');
  if (header.size() != 6 || header[0] != "program" ||
      (header[1] != "call" && header[1] != "vjp" && header[1] != "vjp2")) {
    fail(lines[0], "expected 'program <call|vjp|vjp2> <name> <n_inputs> <n_values> <rng>'");
  }
  kind_ = header[1] == "call" ? Kind::kCall : header[1] == "vjp" ? Kind::kVjp : Kind::kVjp2;
  name_ = unescape(header[2]);
  n_inputs_ = static_cast<int>(to_int(header[3]));
  const int n_values = static_cast<int>(to_int(header[4]));
  rng_ = header[5] == "1";
  if (n_inputs_ < 0 || n_values < n_inputs_) fail(lines[0], "bad value counts");
  constants_.resize(n_values);
  differentiate_.assign(n_inputs_, false);

  // Every value is defined once (an input, a constant or a node's result) before it is read.
  std::vector<bool> defined(n_values, false);
  std::fill(defined.begin(), defined.begin() + n_inputs_, true);
  std::vector<bool> sized(n_values, false);  // known from the inputs' sizes (the prologue)
  std::fill(sized.begin(), sized.begin() + n_inputs_, true);
  const auto define = [&](const std::string& line, int id) {
    if (id < n_inputs_ || id >= n_values || defined[id])
      fail(line, "bad value id " + std::to_string(id));
    defined[id] = true;
  };
  std::vector<int> last_read(n_values, -1);
  const auto read = [&](const std::string& line, int v) {
    if (v < 0 || v >= n_values || !defined[v]) {
      fail(line, "reads undefined value " + std::to_string(v));
    }
    last_read[v] = static_cast<int>(nodes_.size());
  };
  bool in_prologue = true;
  for (size_t l = 1; l < lines.size(); ++l) {
    const std::string& line = lines[l];
    try {
      const char kind = line.empty() ? ' ' : line[0];
      if (kind == 's' || kind == 'k') {
        const auto words = split(line, ' ');
        const int id = static_cast<int>(to_int(words.at(1)));
        define(line, id);
        constants_[id] = kind == 's'
                             ? c10::IValue(wrapped_number(words.at(2)))
                             : c10::IValue(tensor_constant(words.at(2), words.at(3),
                                                           words.size() > 4 ? words[4] : ""));
      } else if (kind == 'z') {
        Node node;
        node.scalar = std::make_unique<ScalarOp>(split(line, ' '));
        for (const int v : node.scalar->reads()) read(line, v);
        define(line, node.scalar->result());
        sized[node.scalar->result()] = in_prologue;
        node.results.push_back(node.scalar->result());
        nodes_.push_back(std::move(node));
      } else if (kind == 'r' || kind == 'e') {
        // r <value> <min> <max|-> <label>;  e <value> <value> <label>
        const auto words = split(line, ' ');
        if (words.size() != (kind == 'r' ? 5u : 4u)) fail(line, "malformed check");
        auto check = std::make_unique<Check>();
        check->value = static_cast<int>(to_int(words[1]));
        if (kind == 'r') {
          check->min = to_int(words[2]);
          check->bounded_above = words[3] != "-";
          check->max = check->bounded_above ? to_int(words[3]) : 0;
        } else {
          check->other = static_cast<int>(to_int(words[2]));
        }
        check->label = unescape(words.back());
        read(line, check->value);
        if (check->other >= 0) read(line, check->other);
        Node node;
        node.check = std::move(check);
        nodes_.push_back(std::move(node));
      } else if (kind == 'n') {
        // n <results> <label> <op spec...>: the op spec keeps its own spaces.
        const size_t results_end = line.find(' ', 2);
        const size_t label_end = line.find(' ', results_end + 1);
        if (results_end == std::string::npos || label_end == std::string::npos)
          fail(line, "short node");
        if (in_prologue) {
          prologue_ = nodes_.size();
          in_prologue = false;
        }
        Node node;
        node.label = node_label(line.substr(results_end + 1, label_end - results_end - 1));
        node.call = std::make_unique<OpCall>(line.substr(label_end + 1));
        if (node.call->kind() != SpecKind::kCall || !node.call->explicit_slots()) {
          fail(line, "a node must be a 'call' whose tensor slots name values");
        }
        for (const int v : node.call->value_indices()) read(line, v);
        if (!has_autograd_kernel(node.call->op())) {
          if (!unregistered_.empty()) unregistered_ += ", ";
          unregistered_ += c10::str(node.call->name(), " (node ", nodes_.size(),
                                    node.label.empty() ? "" : " in " + node.label, ")");
        }
        const std::string results = line.substr(2, results_end - 2);
        if (results != "-") {
          for (const auto& part : split(results, ',')) {
            const int id = part == "_" ? -1 : static_cast<int>(to_int(part));
            if (id >= 0) define(line, id);
            node.results.push_back(id);
          }
        }
        nodes_.push_back(std::move(node));
      } else if (line.rfind("o ", 0) == 0) {
        outputs_ = ids(line.substr(2));
      } else if (line.rfind("O ", 0) == 0) {
        const auto words = split(line, ' ');
        if (words.size() < 2 || words.size() > 3) fail(line, "expected 'O <k> <d,d,..>'");
        const size_t k = static_cast<size_t>(to_int(words[1]));
        if (k != output_shapes_.size()) fail(line, "output shapes out of order");
        std::vector<Size> shape;
        for (const auto& item : split(words.size() == 3 ? words[2] : "", ',')) {
          if (!item.empty() && item[0] == 'z') {
            const int v = static_cast<int>(to_int(item.substr(1)));
            if (v < 0 || v >= n_values || !sized[v]) {
              fail(line, "a size must come from the inputs' sizes (the prologue)");
            }
            shape.push_back({v, 0});
            last_read[v] = std::numeric_limits<int>::max();  // shape inference reads it last
          } else {
            shape.push_back({-1, to_int(item)});
          }
        }
        output_shapes_.push_back(std::move(shape));
      } else if (kind == 'c') {  // c <input> <value>
        const auto words = split(line, ' ');
        if (words.size() != 3) fail(line, "expected 'c <input> <value>'");
        const int input = static_cast<int>(to_int(words[1]));
        const int value = static_cast<int>(to_int(words[2]));
        if (input < 0 || input >= n_inputs_) fail(line, "bad input index");
        read(line, value);
        write_backs_.emplace_back(input, value);
      } else if (kind == 'w') {  // w <exact> <names>
        const auto words = split(line, ' ');
        if (words.size() != 3 || (words[1] != "0" && words[1] != "1")) {
          fail(line, "expected 'w <0|1> <names>'");
        }
        recompute_exact_ = words[1] == "1";
        written_ = unescape(words[2]);
      } else if (kind == 'm') {  // m <elements>
        const auto words = split(line, ' ');
        if (words.size() != 2) fail(line, "expected 'm <elements>'");
        largest_ = to_int(words[1]);
      } else if (kind == 'g') {
        for (const int i : ids(line.size() > 2 ? line.substr(2) : "")) {
          if (i < 0 || i >= n_inputs_) fail(line, "bad input index");
          differentiate_[i] = true;
        }
      } else if (!line.empty()) {
        fail(line, "unknown line kind");
      }
    } catch (const std::invalid_argument& e) {
      fail(line, e.what());
    } catch (const std::out_of_range& e) {
      fail(line, e.what());
    }
  }
  if (in_prologue) prologue_ = nodes_.size();
  if (outputs_.empty()) fail(spec.substr(0, 200), "a program needs an 'o' line with outputs");
  if (!output_shapes_.empty() && output_shapes_.size() != outputs_.size()) {
    fail("O", "one 'O' line per output");
  }
  for (const int v : outputs_) {
    if (v < 0 || v >= n_values || !defined[v])
      fail("o", "output " + std::to_string(v) + " is undefined");
    last_read[v] = static_cast<int>(nodes_.size());  // kept to the end
  }
  for (const auto& write_back : write_backs_) {
    last_read[write_back.second] = static_cast<int>(nodes_.size());
  }
  // Drop each value after its last reader: a model's activations live only as long as needed.
  for (int v = 0; v < n_values; ++v) {
    if (last_read[v] >= 0 && last_read[v] < static_cast<int>(nodes_.size())) {
      nodes_[last_read[v]].release.push_back(v);
    }
  }
}

bool Program::too_small_to_split() const {
  return largest_ >= 0 && largest_ < at::internal::GRAIN_SIZE;
}

int Program::input_count(int /*nparam*/) const {
  // The vjp's inputs: the program's, a gradient per output, the RNG state, the handle.
  const int first_order = n_inputs_ + static_cast<int>(outputs_.size()) + (rng_ ? 1 : 0) + 1;
  switch (kind_) {
    case Kind::kCall: return n_inputs_;
    case Kind::kVjp: return first_order;
    case Kind::kVjp2: return first_order + n_inputs_;
  }
  return n_inputs_;
}

int64_t Program::run(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                     Keep keep, std::unique_ptr<SavedGraph>* slot) const {
  switch (kind_) {
    case Kind::kCall: return forward(inputs, outputs, keep, slot);
    case Kind::kVjp: vjp(inputs, outputs, slot); return 0;
    case Kind::kVjp2: vjp2(inputs, outputs); return 0;
  }
  return 0;
}

namespace {

void run_check(const std::string& kind, const c10::IValue& value, const c10::IValue& other,
               int64_t min, int64_t max, bool bounded_above, const std::string& label) {
  if (value.isNone() || (kind == "e" && other.isNone())) return;  // not known yet (inference)
  const int64_t v = size_value(value, label);
  if (kind == "e") {
    const int64_t w = size_value(other, label);
    if (v != w) {
      throw std::invalid_argument(c10::str(label, " is ", v, ", but must equal ", w));
    }
    return;
  }
  if (bounded_above && min == max && v != min) {
    throw std::invalid_argument(c10::str(label, " is ", v, ", but must be ", min));
  }
  if (v < min || (bounded_above && v > max)) {
    throw std::invalid_argument(c10::str(label, " is ", v, ", outside its range [", min, ", ",
                                         bounded_above ? std::to_string(max) : "inf", "]"));
  }
}

}  // namespace

void Program::evaluate(std::vector<c10::IValue>& values, size_t first, size_t last,
                       c10::Device device, bool check) const {
  for (size_t i = first; i < last; ++i) {
    const Node& node = nodes_[i];
    if (node.check) {
      if (!check) continue;
      const Check& c = *node.check;
      run_check(c.other >= 0 ? "e" : "r", values[c.value],
                c.other >= 0 ? values[c.other] : c10::IValue(), c.min, c.max, c.bounded_above,
                c.label);
    } else if (node.scalar) {
      try {
        values[node.scalar->result()] = node.scalar->eval(values);
      } catch (const std::exception& e) {
        throw std::runtime_error(c10::str("scalar ", node.scalar->result(), ": ", describe(e)));
      }
    } else {
      call(node, i, values, device);
    }
    for (const int v : node.release) values[v] = c10::IValue();
  }
}

void Program::call(const Node& node, size_t index, std::vector<c10::IValue>& values,
                   c10::Device device) const {
  try {
    auto stack = node.call->stack_over(values, device);
    node.call->op().callBoxed(stack);
    auto results = returned_values(stack);
    if (results.size() != node.results.size()) {
      throw std::runtime_error(c10::str("returned ", results.size(),
                                        " values, the program expects ", node.results.size()));
    }
    for (size_t r = 0; r < results.size(); ++r) {
      if (node.results[r] >= 0) values[node.results[r]] = std::move(results[r]);
    }
  } catch (const std::exception& e) {
    throw std::runtime_error(c10::str("node ", index, " (", node.call->name(),
                                      node.label.empty() ? "" : " in " + node.label,
                                      "): ", describe(e)));
  }
}

std::vector<c10::IValue> Program::table(const std::vector<at::Tensor>& inputs,
                                        c10::Device device) const {
  std::vector<c10::IValue> values = device.is_cpu() ? constants_ : constants_on(device);
  for (int i = 0; i < n_inputs_; ++i) values[i] = inputs[i];
  return values;
}

std::vector<c10::IValue> Program::constants_on(c10::Device device) const {
  std::lock_guard<std::mutex> lock(device_constants_mutex_);
  auto found = device_constants_.find(device);
  if (found != device_constants_.end()) return found->second;
  std::vector<c10::IValue> values = constants_;
  for (auto& value : values) {
    // A wrapped number stays a CPU scalar, as torch's own are on every device.
    if (value.isTensor() && !value.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
      value = value.toTensor().to(device);
    }
  }
  return device_constants_.emplace(device, std::move(values)).first->second;
}

void Program::write_back(const std::vector<at::Tensor>& inputs,
                         const std::vector<c10::IValue>& values) const {
  at::NoGradGuard no_grad;
  for (const auto& [input, value] : write_backs_) inputs[input].copy_(values[value].toTensor());
}

void Program::check_derivatives(const std::vector<at::Tensor>& ys) const {
  if (!unregistered_.empty() && reaches_autograd_fallback(ys)) {
    throw std::runtime_error(no_derivative(unregistered_));
  }
}

void Program::check_recompute() const {
  if (!needs_kept_graph()) return;
  throw std::runtime_error(
      "the forward updated its buffers (" + written_ +
      ") in place and kept no autograd graph for this backward, and running it again on their "
      "new values would give other outputs; differentiate the call where it runs (ms.grad, "
      "value_and_grad), whose backward then takes the graph the forward kept");
}

const at::Tensor& Program::output(const std::vector<c10::IValue>& values, size_t k) const {
  const c10::IValue& value = values[outputs_[k]];
  if (!value.isTensor()) {
    throw std::runtime_error(c10::str("output ", k, " is a ", value.tagKind(), ", not a tensor"));
  }
  return value.toTensor();
}

std::vector<std::vector<int64_t>> Program::infer_shapes(
    const std::vector<std::vector<int64_t>>& input_shapes, bool check) const {
  if (output_shapes_.empty()) {
    throw std::invalid_argument("the program carries no output shapes (a static capture)");
  }
  if (input_shapes.size() != static_cast<size_t>(n_inputs_)) {
    throw std::invalid_argument(
        c10::str("expects ", n_inputs_, " inputs, got ", input_shapes.size()));
  }
  std::vector<c10::IValue> values(constants_.size());
  for (int i = 0; i < n_inputs_; ++i) values[i] = c10::IValue(input_shapes[i]);
  evaluate(values, 0, prologue_, c10::Device(c10::kMeta), check);  // sizes only: no node runs
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& shape : output_shapes_) {
    std::vector<int64_t> sizes;
    for (const Size& size : shape) {
      if (size.value < 0) {
        sizes.push_back(size.constant);
      } else {
        const c10::IValue& v = values[size.value];
        sizes.push_back(v.isNone() ? -1 : size_value(v, "an output size"));
      }
    }
    shapes.push_back(std::move(sizes));
  }
  if (rng_) {  // torch's CPU generator state
    static const int64_t state_bytes = at::detail::getDefaultCPUGenerator().get_state().numel();
    shapes.push_back({state_bytes});
  }
  shapes.push_back({1});  // the handle of the graph it kept (program/saved.h)
  return shapes;
}

int64_t Program::forward(const std::vector<at::Tensor>& inputs,
                         const std::vector<at::Tensor>& outputs, Keep keep,
                         std::unique_ptr<SavedGraph>* slot) const {
  const size_t n_out = outputs_.size();
  if (inputs.size() != static_cast<size_t>(n_inputs_) || outputs.size() != n_out + rng_ + 1) {
    throw std::invalid_argument(c10::str("expects ", n_inputs_, " inputs and ", n_out + rng_ + 1,
                                         " outputs, got ", inputs.size(), " and ", outputs.size()));
  }
  const at::Tensor& handle = outputs.back();
  const c10::Device device = handle.device();         // the launch's: MindSpore's buffers are on it
  if (rng_) record_rng_state(outputs[n_out], n_out);  // for a VJP that recomputes
  // The VJP finds a parked graph by the handle it reads on the host: on a device that read
  // would wait for the stream, so a device's forward parks nothing and its VJP recomputes.
  if (keep == Keep::kPark && !device.is_cpu()) keep = Keep::kNothing;
  if (keep == Keep::kNothing) {
    c10::InferenceMode guard;
    std::vector<c10::IValue> values = table(inputs, device);
    evaluate(values, 0, nodes_.size(), device);
    for (size_t k = 0; k < n_out; ++k) copy_into_output(outputs[k], output(values, k), k);
    write_back(inputs, values);
    handle.fill_(0);
    return 0;
  }
  // Under autograd, as torch eager runs a module whose backward will follow: its graph is the
  // VJP's, which then runs no second forward.
  c10::AutoGradMode grad_mode(true);
  Recomputed r = leaves(inputs, device);
  // The kept graph may have saved a buffer the write-back then overwrites (x * scale, then
  // scale.mul_(2)): its nodes read a copy, so the backward sees the values the forward read.
  for (const auto& write_back : write_backs_) {
    r.values[write_back.first] = r.values[write_back.first].toTensor().clone();
  }
  evaluate(r.values, 0, nodes_.size(), device);
  auto graph = std::make_unique<SavedGraph>();
  for (size_t k = 0; k < n_out; ++k) graph->outputs.push_back(output(r.values, k));
  {
    at::NoGradGuard no_grad;  // MindSpore's buffers are not part of the graph
    for (size_t k = 0; k < n_out; ++k) copy_into_output(outputs[k], graph->outputs[k], k);
  }
  write_back(inputs, r.values);
  int64_t id = 0;
  if (!r.wrt.empty()) {  // else nothing is differentiable: the VJP writes zeros
    graph->leaves = std::move(r.wrt);
    graph->leaf_index = std::move(r.wrt_index);
    if (keep == Keep::kPark) {
      id = park(std::move(graph));
    } else if (slot != nullptr) {
      *slot = std::move(graph);
    }
  }
  handle.fill_(id);
  return id;
}

// The backward, in one launch. With the graph its forward kept (program/saved.h) it is one
// backward pass; without one (the forward did not record, or this is the recompute fallback)
// it recomputes the forward under autograd on the saved inputs first, which costs a second
// forward but no memory between the two kernels. Each leaf's .grad is MindSpore's (zeroed)
// output buffer, so autograd accumulates into it in place and frees every gradient as soon as
// it lands, where torch::autograd::grad would hold them all, then copy.
void Program::vjp(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                  std::unique_ptr<SavedGraph>* slot) const {
  const size_t n_out = outputs_.size();
  const size_t n_in = n_inputs_ + n_out + rng_ + 1;
  if (inputs.size() != n_in || outputs.size() != static_cast<size_t>(n_inputs_)) {
    throw std::invalid_argument(c10::str("the backward expects ", n_in, " inputs and ", n_inputs_,
                                         " outputs, got ", inputs.size(), " and ", outputs.size()));
  }
  std::unique_ptr<SavedGraph> graph;
  if (slot != nullptr && *slot) {
    graph = std::move(*slot);
  } else if (inputs.back().is_cpu()) {
    // MindSpore's CPU buffers are host memory (device/cpu.cpp checks each): the handle is read
    // in place, with nothing to wait for. A device's forward parked nothing (forward).
    const int64_t handle = *inputs.back().const_data_ptr<int64_t>();
    if (handle > 0) {
      graph = take(handle);
    } else if (handle < 0) {  // its forward kernel kept nothing, but will from now on (saved.h)
      mark_backward(-handle);
    }
  }
  c10::AutoGradMode grad_mode(true);
  if (graph) {
    check_derivatives(graph->outputs);  // a refusal drops the kept graph too
    backward_into(graph->outputs, inputs, graph->leaves, graph->leaf_index, outputs);
    return;
  }
  check_recompute();
  auto [values, wrt, wrt_index] = recompute(inputs);
  if (wrt.empty()) {  // nothing is differentiable: all zeros
    for (const auto& out : outputs) out.zero_();
    return;
  }
  std::vector<at::Tensor> ys;
  for (size_t k = 0; k < n_out; ++k) ys.push_back(output(values, k));
  check_derivatives(ys);
  backward_into(ys, inputs, wrt, wrt_index, outputs);
}

void Program::backward_into(const std::vector<at::Tensor>& ys,
                            const std::vector<at::Tensor>& inputs,
                            const std::vector<at::Tensor>& leaves,
                            const std::vector<size_t>& leaf_index,
                            const std::vector<at::Tensor>& outputs) const {
  // Each gradient is copied once into its buffer as it lands (WriteGradient), where zeroing the
  // buffer as the leaf's .grad for AccumulateGrad to add into cost a write, then two reads and
  // a write; AccumulateGrad stores a fresh gradient without a copy (it steals it).
  std::vector<uint8_t> written(outputs.size(), 0);
  const GradientWrites hooks(leaves);
  std::vector<at::Tensor> roots;
  std::vector<at::Tensor> grads;
  for (size_t k = 0; k < ys.size(); ++k) {
    if (ys[k].requires_grad()) {
      roots.push_back(ys[k]);
      grads.push_back(inputs[n_inputs_ + k]);
    }
  }
  if (!roots.empty()) {  // else no output depends on a differentiable input: all zeros
    for (size_t k = 0; k < leaves.size(); ++k) {
      leaves[k].mutable_grad().reset();
      torch::autograd::impl::set_post_acc_grad_hooks(
          leaves[k], std::make_unique<WriteGradient>(outputs[leaf_index[k]], leaf_index[k],
                                                     &written[leaf_index[k]]));
    }
    torch::autograd::backward(roots, grads, /*retain_graph=*/false, /*create_graph=*/false, leaves);
  }
  // What no gradient reached: the inputs nothing differentiable depends on, and the rest.
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!written[i]) outputs[i].zero_();
  }
}

Program::Recomputed Program::leaves(const std::vector<at::Tensor>& inputs,
                                    c10::Device device) const {
  Recomputed r{table(inputs, device), {}, {}};
  for (int i = 0; i < n_inputs_; ++i) {
    at::Tensor leaf = inputs[i].detach();
    if (differentiate_[i] &&
        (at::isFloatingType(leaf.scalar_type()) || at::isComplexType(leaf.scalar_type()))) {
      leaf.requires_grad_(true);
      r.wrt.push_back(leaf);
      r.wrt_index.push_back(i);
    }
    r.values[i] = leaf;
  }
  return r;
}

Program::Recomputed Program::recompute(const std::vector<at::Tensor>& inputs) const {
  // The launch's device: the handle's (the backward's inputs hold it after the RNG state).
  const c10::Device device = inputs[n_inputs_ + outputs_.size() + rng_].device();
  Recomputed r = leaves(inputs, device);
  if (r.wrt.empty()) return r;
  std::optional<RngReplay> replay;
  if (rng_) replay.emplace(inputs[n_inputs_ + outputs_.size()]);
  evaluate(r.values, 0, nodes_.size(), device);
  return r;
}

// The second order, for gradient penalties and Hessian-vector products: the first-order
// gradients again, with create_graph and with the incoming output gradients as leaves too, then
// one more autograd pass of <gradients, their cotangents> back to the inputs and to those
// output gradients. Like the VJP, it recomputes the forward and keeps nothing.
void Program::vjp2(const std::vector<at::Tensor>& inputs,
                   const std::vector<at::Tensor>& outputs) const {
  const size_t n_out = outputs_.size();
  const size_t first_cotangent = n_inputs_ + n_out + rng_ + 1;  // after the handle
  if (inputs.size() != first_cotangent + n_inputs_ || outputs.size() != n_inputs_ + n_out) {
    throw std::invalid_argument(
        c10::str("the second-order backward expects ", first_cotangent + n_inputs_, " inputs and ",
                 n_inputs_ + n_out, " outputs, got ", inputs.size(), " and ", outputs.size()));
  }
  check_recompute();
  for (const auto& out : outputs) out.zero_();  // what nothing depends on stays zero
  c10::AutoGradMode grad_mode(true);
  auto [values, wrt, wrt_index] = recompute(inputs);
  if (wrt.empty()) return;  // nothing is differentiable: all zeros
  std::vector<at::Tensor> ys;
  std::vector<at::Tensor> dys;
  std::vector<at::Tensor> vars = wrt;          // what the second pass differentiates
  std::vector<size_t> var_output = wrt_index;  // and the output buffer each lands in
  for (size_t k = 0; k < n_out; ++k) {
    const at::Tensor& y = output(values, k);
    if (!y.requires_grad()) continue;
    at::Tensor dy = inputs[n_inputs_ + k].detach();
    if (at::isFloatingType(dy.scalar_type()) || at::isComplexType(dy.scalar_type())) {
      dy.requires_grad_(true);
      vars.push_back(dy);
      var_output.push_back(n_inputs_ + k);
    }
    ys.push_back(y);
    dys.push_back(dy);
  }
  if (ys.empty()) return;
  check_derivatives(ys);
  const auto grads = torch::autograd::grad(ys, wrt, dys, /*retain_graph=*/true,
                                           /*create_graph=*/true, /*allow_unused=*/true);
  std::vector<at::Tensor> targets;
  std::vector<at::Tensor> cotangents;
  for (size_t k = 0; k < wrt.size(); ++k) {
    if (grads[k].defined() && grads[k].requires_grad()) {
      targets.push_back(grads[k]);
      cotangents.push_back(inputs[first_cotangent + wrt_index[k]]);
    }
  }
  if (targets.empty()) return;  // every gradient is constant: second derivatives are zero
  const auto second = torch::autograd::grad(targets, vars, cotangents, /*retain_graph=*/false,
                                            /*create_graph=*/false, /*allow_unused=*/true);
  for (size_t j = 0; j < vars.size(); ++j) {
    if (second[j].defined()) copy_into_output(outputs[var_output[j]], second[j], var_output[j]);
  }
}

}  // namespace ms_aten
