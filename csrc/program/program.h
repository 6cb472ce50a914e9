// A captured torch graph run as one kernel: a list of OpCalls (spec.h) over a table of values.
//
// The spec (written by ms_aten/programs/program.py) is one line per entry, '\n'-separated:
//   program <call|vjp|vjp2> <%-escaped name> <n_inputs> <n_values> <rng: 0|1>
//   s <value> <b0|b1|i<int>|f<float>>     a Python number in a Tensor slot: a 0-dim tensor marked
//                                         as a wrapped number, so type promotion treats it as
//                                         torch's Python arg parser does
//   k <value> <dtype> <I<shape>> <hex>    a tensor constant, its bytes in hex
//   n <results> <%-escaped label> <op>    a node: <op> is an OpCall spec whose tensor slots
//                                         (t<j>, T[..], Q[..]) name values; <results> are the
//                                         value ids of its returned tensors, `_` for one
//                                         nobody reads, `-` when it returns none; <label>
//                                         is its module path, `-` for none
//   o <v,v,..>                            the program's outputs
//   g <i,i,..>                            the inputs the VJP differentiates (may be empty)
// Values 0 .. n_inputs-1 are the program's inputs. MindSpore's buffers, in order:
//   call: inputs, then one buffer per output, then the RNG state (rng = 1);
//   vjp:  inputs, one gradient per output, the RNG state (rng = 1); then one gradient per input;
//   vjp2: the vjp's inputs, one cotangent per gradient the vjp returns; then one gradient per
//         input and one per output gradient (the second order: the vjp differentiated).
// With rng = 1 the forward records torch's CPU generator state before it runs, and the VJP,
// which recomputes the forward under autograd, replays it: dropout's backward sees the
// forward's mask.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "op/spec.h"

namespace ms_aten {

class Program {
 public:
  explicit Program(const std::string& spec);

  const std::string& name() const { return name_; }
  // The number of MindSpore inputs of a launch with `nparam` buffers.
  int input_count(int nparam) const;
  // The forward, the VJP or its own VJP, as the spec's kind says.
  void run(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) const;

 private:
  struct Node {
    std::unique_ptr<OpCall> call;
    std::vector<int> results;  // value id per returned tensor, -1 for unused
    std::vector<int> release;  // values read for the last time by this node
    std::string label;         // where it came from, for messages
  };

  void forward(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) const;
  void vjp(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) const;
  void vjp2(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) const;
  // What a backward recomputes: the value table (outputs included) and the differentiable
  // inputs, leaves that require grad, with their input indices.
  struct Recomputed {
    std::vector<at::Tensor> values;
    std::vector<at::Tensor> wrt;
    std::vector<size_t> wrt_index;
  };
  // Zeroes the backward's `outputs` (what nothing depends on stays zero), then runs the forward
  // again under autograd (grad mode on, the RNG state replayed); runs nothing when no input is
  // differentiable (wrt empty).
  Recomputed recompute(const std::vector<at::Tensor>& inputs,
                       const std::vector<at::Tensor>& outputs) const;
  // Runs every node on `values` (inputs and constants set), leaving the outputs in it.
  void evaluate(std::vector<at::Tensor>& values) const;

  std::string name_;
  enum class Kind { kCall, kVjp, kVjp2 } kind_ = Kind::kCall;
  bool rng_ = false;
  int n_inputs_ = 0;
  std::vector<at::Tensor> constants_;  // n_values long; defined where a constant lives
  std::vector<Node> nodes_;
  std::vector<int> outputs_;
  std::vector<bool> differentiate_;  // per input, for the VJP
};

}  // namespace ms_aten
