// Symbolic sizes at run time: the SymInt arithmetic torch.export emits, evaluated in C++.
//
// A program's value table (program.h) holds scalars beside tensors: a size read from a tensor
// (torch's sym_size, sym_numel, sym_stride), the arithmetic between them (operator.add, ...,
// torch.sym_max), and the comparisons behind torch's runtime asserts. A scalar line is
//   z <value> <fn> <operand>...
// where an operand is z<value> (another value of the table) or a constant token (i<int>,
// f<float>, b0/b1). The functions, with Python's semantics (floordiv and mod round toward
// negative infinity, truediv gives a float):
//   size z<t> i<d>   numel z<t>   stride z<t> i<d>   storage_offset z<t>
//   add sub mul floordiv mod truediv pow   neg abs   min max
//   eq ne lt le gt ge   and or not   float int ceil floor   ite <cond> <then> <else>
//
// Shape inference evaluates the same lines before any tensor exists: there a tensor value is its
// shape (an int list, -1 for a size MindSpore does not know yet), and every function of an
// unknown size is unknown (None).
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace ms_aten {

class ScalarOp {
 public:
  // words: "z", the result id, the function, the operands.
  explicit ScalarOp(const std::vector<std::string>& words);

  int result() const { return result_; }
  // The value ids this op reads.
  std::vector<int> reads() const;
  // Its value over `values`, where a tensor operand is a Tensor, or a shape (IntList) during
  // shape inference; None when an operand is None (unknown).
  c10::IValue eval(const std::vector<c10::IValue>& values) const;

 private:
  struct Operand {
    int value = -1;  // a value id, or -1 for the constant
    c10::IValue constant;
  };
  const c10::IValue& operand(const std::vector<c10::IValue>& values, size_t i) const;

  int result_ = -1;
  std::string fn_;
  std::vector<Operand> operands_;
};

// A tensor value's sizes: a Tensor's, or a shape given as an IntList (-1: unknown).
std::vector<int64_t> sizes_of(const c10::IValue& value);

}  // namespace ms_aten
