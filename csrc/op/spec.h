// An op spec, decoded once per kernel into a ready-to-call form.
//
// The spec is a primitive attribute written by ms_aten/ops/binding.py: space-separated tokens,
//   <kind> <qualified op name> <overload or "."> <output count, "*" or "0"> <argument>...
// where <kind> is call, out, vjp / vjp<k> (the order-k vector-Jacobian product, csrc/op/grad.h),
// bounded (the functional call into outputs padded to an upper bound, csrc/op/bounded.h), or
// mutate (an op that writes some of its call-time tensors in place, csrc/op/mutate.h).
// An output count of "*" means the op returns Tensor[] and MindSpore's buffers say how many;
// "0" means it returns nothing, and MindSpore gives it one placeholder output that stays unused.
// One argument token per schema argument, in schema order:
//   t<j>        the j-th call-time tensor (Tensor or Tensor?)
//   w<j>        the j-th call-time tensor holds a Python number: a wrapped number, as torch
//               makes one (c10::scalar_to_tensor of its value, set_wrapped_number)
//   T           a Tensor[] filled by the variable-length run of call-time tensors
//   Q           a Tensor?[] filled the same way (every entry present)
//   T[i,j,..]   a Tensor[] of the call-time tensors i, j, ... (any number of such lists)
//   Q[i,_,..]   a Tensor?[] the same way, `_` for a None entry
//   u<j>        the j-th call-time tensor, which the op writes in place (mutate, or a program
//               node's value j: program/program.h)
//   U[i,j,..]   a Tensor[] of call-time tensors the op writes in place (mutate only)
//   r<j>, R[i,j,..]  a tensor or Tensor[] the schema writes but this call does not, passed as it
//               is (mutate only: the fused optimizers write grads only to unscale them by a
//               grad_scale); without it such an argument is copied first
//   o<k>        the k-th MindSpore output buffer (out= argument of an out variant)
//   N           None            D         the schema's default
//   b0 b1       bool            i<int>    int            f<double>  float
//   s<%-escaped> string          I<a,b,..> int list       F<a,b,..>  float list
//   B<0,1,..>   bool list       y<dtype>  ScalarType     d<%-esc.>  Device
//   c<re>,<im>  complex         S<x/y/..> Scalar?[]: number tokens and N, '/'-separated
//   W<b|i|f|c..> a constant number in a Tensor slot, wrapped as w<j> is
// In a program's nodes (program/program.h) two more name scalars of its value table, sizes that
// torch.export keeps symbolic (SymInt, SymFloat, SymBool) or a number read from a tensor:
//   z<j>        the scalar value j, for any non-tensor argument (int, float, Scalar, bool)
//   Z<j>        the scalar value j where the schema takes a Tensor, wrapped as W is
//   J<a,b,..>   an int list whose items are ints or z<j> (view sizes, expand sizes)
//   L           the launch's device (a Device argument): a program carries no device of its
//               own, so arange, full, _to_copy, ... build on the device its buffers are on
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <vector>

namespace ms_aten {

// kInplace: the in-place overload, run on output 0 after call-time tensor 0 is copied there.
// kBounded: the functional call, each result written into a padded output plus its shape.
// kMutate: an op that writes the call-time tensors its u/U tokens name (MindSpore's buffers);
// an argument the op's schema writes without such a token is copied first, so the op writes
// the copy and MindSpore's buffer stays as it was.
enum class SpecKind { kCall, kOut, kInplace, kVjp, kBounded, kMutate };

// Token helpers shared with program.cpp.
std::vector<std::string> split(const std::string& text, char sep);
std::string unescape(const std::string& text);  // %XX escapes
int64_t to_int(const std::string& text);
c10::IValue constant(const std::string& token);  // a constant argument token (N, b1, i3, ...)
// A number as torch passes one for a Tensor argument: c10::scalar_to_tensor, wrapped number.
at::Tensor wrapped_number(const c10::Scalar& value);

class OpCall {
 public:
  explicit OpCall(const std::string& spec);

  SpecKind kind() const { return kind_; }
  // For a VJP spec, how many times the op is differentiated (vjp: 1, vjp2: 2, ...); else 0.
  int order() const { return order_; }
  const std::string& name() const { return name_; }
  const c10::OperatorHandle& op() const { return *op_; }

  // The number of call-time tensors, given the total number of MindSpore parameters
  // (inputs + outputs) of a launch.
  int input_count(int nparam) const;
  // For a vjp spec: how many tensors the VJP returns for `vjp_inputs` inputs (one gradient
  // for each of the first that many inputs), or -1 when the count does not fit the op.
  int vjp_output_count(int vjp_inputs) const;
  // The number of MindSpore outputs of a launch.
  int output_count(int nparam) const { return nparam - input_count(nparam); }
  // The op returns nothing: its one MindSpore output is a placeholder (output count "0").
  bool returns_nothing() const { return fixed_outputs_ == 0; }

  // The call-time tensor index that fills schema argument `name` (a plain Tensor or Tensor?
  // slot) when `n_inputs` tensors are given, or -1.
  int input_of_argument(const std::string& name, int n_inputs) const;

  // The argument stack for one call: constants copied, tensor slots filled from `inputs`, out=
  // slots from `outputs`. Only the stack is built per launch; nothing is parsed.
  std::vector<c10::IValue> stack(const std::vector<at::Tensor>& inputs,
                                 const std::vector<at::Tensor>& outputs) const;

  // The stack of a program node (program/program.h): every tensor slot names its index in
  // `values` (t<j>, T[..], Q[..]), and z<j> / J<..> name scalars there; a variable-length list
  // or an out= slot is an error at decode time.
  // L tokens take `device`, the launch's.
  std::vector<c10::IValue> stack_over(const std::vector<c10::IValue>& values,
                                      c10::Device device) const;

  // The indices into a program's values this call reads, tensors and scalars (for the value
  // lifetimes and checks).
  std::vector<int> value_indices() const;
  // Whether every tensor slot is indexed explicitly (no T/Q run, no out= slot).
  bool explicit_slots() const;
  // Whether the call writes a tensor it is given (a u / U slot).
  bool writes() const;

 private:
  // The forward's input and output counts for `total` = a * inputs + b * outputs tensors.
  bool vjp_tensor_counts(int64_t total, int64_t a, int64_t b, int64_t* n_in, int64_t* n_out) const;
  // Where a Tensor slot's tensor sits among the call-time tensors; those after the list shift.
  int input_index(int slot_index, int list_len) const;

  enum class SlotKind {
    kConst,
    kTensor,
    kWrapped,
    kTensorList,
    kOptTensorList,
    kOutput,
    kScalar,
    kWrappedScalar,
    kIntList,
    kLaunchDevice
  };
  struct Slot {
    SlotKind kind;
    int index;  // call-time tensor index in schema order, output index, or scalar value id
    // A list with explicit members (T[..] / Q[..]): their indices, -1 for None; a list
    // without them takes the variable-length run. J<..>: a value id per item, -1 for a constant.
    std::optional<std::vector<int>> members;
    std::vector<int64_t> ints;  // J<..>: the constant items
    bool written = false;       // u / U: the op writes MindSpore's buffer (mutate)
    bool copy_first = false;    // the schema writes it, the spec did not say so: pass a copy
    bool unwritten = false;     // r / R: the schema writes it, this call does not (mutate)
  };

  // For a mutate spec: checks the written slots against the schema's write annotations and
  // marks the slots the op writes without the spec saying so.
  void check_writes(const std::string& spec);

  // Values: the call-time tensors (std::vector<at::Tensor>), or a program's value table
  // (std::vector<c10::IValue>), which alone holds the scalars z<j> and J<..> name.
  // `device`: what L tokens take (a program node's launch device; none for an op spec).
  template <class Values>
  void fill(std::vector<c10::IValue>& stack, const Values& inputs, int list_len,
            const std::vector<at::Tensor>& outputs, std::optional<c10::Device> device) const;

  SpecKind kind_;
  int order_ = 0;
  std::string name_;                       // "aten::max.dim", for messages
  std::optional<c10::OperatorHandle> op_;  // set by the constructor; the type has no default
  int fixed_outputs_ = -1;          // -1: the op returns Tensor[] and the count comes from nparam
  int fixed_inputs_ = 0;            // call-time tensors outside a list
  bool has_list_ = false;           // one Tensor[] / Tensor?[] takes the remaining inputs
  bool has_explicit_list_ = false;  // some T[..] / Q[..] list names its members
  int list_start_ = 0;              // index of the list's first tensor among the call-time tensors
  std::vector<c10::IValue> constants_;
  std::vector<Slot> slots_;
};

}  // namespace ms_aten
