// A captured torch graph run as one kernel: a list of OpCalls (op/spec.h) over a table of
// values, tensors and scalars.
//
// The spec (written by ms_aten/programs/lowering/program.py) is one line per entry, '\n'-separated:
//   program <call|vjp|vjp2> <%-escaped name> <n_inputs> <n_values> <rng: 0|1>
//   s <value> <b0|b1|i<int>|f<float>>     a Python number in a Tensor slot: a 0-dim tensor marked
//                                         as a wrapped number, so type promotion treats it as
//                                         torch's Python arg parser does
//   k <value> <dtype> <I<shape>> <hex>    a tensor constant, its bytes in hex
//   z <value> <fn> <operand>...           a scalar: a size, or arithmetic on sizes
//                                         (program/scalars.h)
//   r <value> <min> <max|-> <%-label>     a check: scalar <value> lies in [min, max]
//   e <value> <value> <%-label>           a check: two scalars are equal
//   n <results> <%-escaped label> <op>    a node: <op> is an OpCall spec whose tensor slots
//                                         (t<j>, T[..], Q[..]) and scalar slots (z<j>, J<..>)
//                                         name values; <results> are the value ids of what it
//                                         returns (tensors, or scalars such as .item()'s),
//                                         `_` for one nobody reads, `-` when it returns none;
//                                         <label> is its module path, `-` for none
//                                         a u<j> slot (op/spec.h) writes value j in place:
//                                         a buffer input the program updates, or a view of one
//   c <input> <value>                     a buffer update no node could write in place: after
//                                         the nodes and the outputs' copies, the value is
//                                         copied into input <input> (a forward spec only)
//   w <exact: 0|1> <%-escaped names>      the forward writes these buffers (u slots, c lines);
//                                         exact = 1 when running the forward again on their new
//                                         values gives the same outputs (an index_copy_ of new
//                                         rows into a KV cache), so a VJP may recompute
//   m <elements>                          the most elements any of its tensors holds (absent:
//                                         not known, a dynamic capture); below ATen's grain size
//                                         the launch holds ATen to one thread (too_small_to_split)
//   o <v,v,..>                            the program's outputs
//   O <k> <d,d,..>                        output k's shape: each size an int or z<j>
//   g <i,i,..>                            the inputs the VJP differentiates (may be empty)
// Values 0 .. n_inputs-1 are the program's inputs. The lines before the first node, the
// prologue, depend on the inputs' sizes alone: shape inference evaluates them (infer_shapes),
// and a launch runs them first, so a size outside its range fails before any op runs.
// MindSpore's buffers, in order:
//   call: inputs, then one buffer per output, the RNG state (rng = 1), the handle (int64 [1]);
//   vjp:  inputs, one gradient per output, the RNG state (rng = 1), the handle; then one
//         gradient per input;
//   vjp2: the vjp's inputs, one cotangent per gradient the vjp returns; then one gradient per
//         input and one per output gradient (the second order: the vjp differentiated).
// A forward that writes its buffers leaves their new values in MindSpore's input buffers, and
// the VJP spec is the functional graph, which writes nothing: a recompute reads the buffers'
// new values, which is exact only where the `w` line says so; otherwise a VJP that finds no
// kept graph refuses, and a record kernel keeps its graph from its first launch.
// The VJP takes the autograd graph its forward kept (program/saved.h), found by the handle or
// handed over in a slot, and runs one backward pass. Without one it recomputes the forward
// under autograd: with rng = 1 the forward records the generator state of the launch's device
// before it runs, and the recompute replays it, so dropout's backward sees the forward's mask.
// A program carries no device of its own: its Device arguments are L tokens (op/spec.h) and its
// tensor constants go to the launch's device (the device of MindSpore's buffers), copied there
// once per device. The launch reads no tensor value back to the host, on a device or on the CPU
// (launch/kernel.h, host_read_count), except the recompute of a random program on a device,
// which reads the RNG state its forward recorded.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "op/spec.h"
#include "program/saved.h"
#include "program/scalars.h"

namespace ms_aten {

class Program {
 public:
  explicit Program(const std::string& spec);

  const std::string& name() const { return name_; }
  int inputs() const { return n_inputs_; }
  int outputs() const { return static_cast<int>(outputs_.size()); }
  // The number of MindSpore inputs of a launch with `nparam` buffers.
  int input_count(int nparam) const;
  // How a forward keeps its autograd graph for the VJP: not at all (inference), parked in the
  // table under the handle it writes into its last output, or in the caller's slot.
  enum class Keep { kNothing, kPark, kSlot };
  // The forward, the VJP or its own VJP, as the spec's kind says; returns the forward's handle
  // (0 when it parked nothing). A VJP takes the graph in `slot` if it holds one.
  int64_t run(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
              Keep keep = Keep::kNothing, std::unique_ptr<SavedGraph>* slot = nullptr) const;
  // The forward's output shapes for inputs of these shapes (-1: a size not known yet, which
  // makes every size computed from it -1), the RNG state's included; the prologue's checks run
  // on the sizes known.
  std::vector<std::vector<int64_t>> infer_shapes(
      const std::vector<std::vector<int64_t>>& input_shapes, bool check = true) const;
  // The forward writes buffers that a recompute would read with their new values, giving
  // other outputs: its backward needs the graph the forward kept.
  bool needs_kept_graph() const { return !written_.empty() && !recompute_exact_; }
  // Every tensor of the program holds fewer elements than ATen's grain size, below which its
  // parallel loops would not split an elementwise loop: the launch runs it with ATen held to
  // one thread, as a small op runs inline (launch/launch_thread.h). A team woken for such work
  // (layer_norm and attention split rows with grain 1) costs more than it saves, and its
  // workers spin on after the launch, on the cores MindSpore's own kernels need next.
  bool too_small_to_split() const;

 private:
  // A size check of the prologue (r and e lines).
  struct Check {
    int value = -1;
    int other = -1;  // e: the value it must equal; -1 for a range
    int64_t min = 0;
    int64_t max = 0;
    bool bounded_above = false;
    std::string label;
  };
  struct Node {
    std::unique_ptr<OpCall> call;      // an op, or
    std::unique_ptr<ScalarOp> scalar;  // a scalar, or
    std::unique_ptr<Check> check;      // a check
    std::vector<int> results;          // value id per returned value, -1 for unused
    std::vector<int> release;          // values read for the last time by this node
    std::string label;                 // where it came from, for messages
  };
  // One size of an output's shape: a value id, or a constant (value -1).
  struct Size {
    int value = -1;
    int64_t constant = 0;
  };

  int64_t forward(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                  Keep keep, std::unique_ptr<SavedGraph>* slot) const;
  void vjp(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
           std::unique_ptr<SavedGraph>* slot) const;
  void vjp2(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) const;
  // What a backward recomputes: the value table (outputs included) and the differentiable
  // inputs, leaves that require grad, with their input indices.
  struct Recomputed {
    std::vector<c10::IValue> values;
    std::vector<at::Tensor> wrt;
    std::vector<size_t> wrt_index;
  };
  // The table with the inputs in place, the differentiable ones as leaves that require grad.
  Recomputed leaves(const std::vector<at::Tensor>& inputs, c10::Device device) const;
  // Runs the forward again under autograd (grad mode on, the RNG state replayed); runs nothing
  // when no input is differentiable (wrt empty).
  Recomputed recompute(const std::vector<at::Tensor>& inputs) const;
  // One backward pass from the program's outputs `ys` (the VJP's incoming gradients are its
  // inputs after the program's) into the gradient buffers of the leaves, each written once as
  // its gradient lands; every other output buffer zeroed.
  void backward_into(const std::vector<at::Tensor>& ys, const std::vector<at::Tensor>& inputs,
                     const std::vector<at::Tensor>& leaves, const std::vector<size_t>& leaf_index,
                     const std::vector<at::Tensor>& outputs) const;
  // Runs nodes [first, last) on `values` (inputs and constants set), leaving their results in it,
  // on the launch's `device`; without `check`, the checks are skipped.
  void evaluate(std::vector<c10::IValue>& values, size_t first, size_t last, c10::Device device,
                bool check = true) const;
  // Runs the op of node `index`, its results into `values`; errors name the node.
  void call(const Node& node, size_t index, std::vector<c10::IValue>& values,
            c10::Device device) const;
  // The table with the inputs and constants (on the launch's `device`) in place.
  std::vector<c10::IValue> table(const std::vector<at::Tensor>& inputs, c10::Device device) const;
  // The constants with the tensor constants on `device`, copied there at its first launch.
  std::vector<c10::IValue> constants_on(c10::Device device) const;
  // The c lines: each value copied into its buffer input.
  void write_back(const std::vector<at::Tensor>& inputs,
                  const std::vector<c10::IValue>& values) const;
  // Throws if a backward from the outputs `ys` would pass through torch's autograd fallback
  // (op/grad.h): a node whose op has no autograd kernel and recorded no history of its own.
  void check_derivatives(const std::vector<at::Tensor>& ys) const;
  // Throws unless a backward may recompute this forward (needs_kept_graph).
  void check_recompute() const;
  const at::Tensor& output(const std::vector<c10::IValue>& values, size_t k) const;

  std::string name_;
  enum class Kind { kCall, kVjp, kVjp2 } kind_ = Kind::kCall;
  bool rng_ = false;
  int n_inputs_ = 0;
  std::vector<c10::IValue> constants_;  // n_values long; set where a constant lives (CPU)
  mutable std::mutex device_constants_mutex_;
  mutable std::unordered_map<c10::Device, std::vector<c10::IValue>> device_constants_;
  std::vector<Node> nodes_;
  size_t prologue_ = 0;  // nodes_[0, prologue_) depend on the inputs' sizes alone
  std::vector<int> outputs_;
  std::vector<std::vector<Size>> output_shapes_;  // from the O lines; empty without them
  std::vector<bool> differentiate_;               // per input, for the VJP
  std::vector<std::pair<int, int>> write_backs_;  // c lines: (input, value)
  std::string written_;                           // w line: the buffers it writes, for messages
  bool recompute_exact_ = true;
  int64_t largest_ = -1;      // the m line; -1: not known
  std::string unregistered_;  // the nodes whose op has no autograd kernel, for check_derivatives
};

}  // namespace ms_aten
