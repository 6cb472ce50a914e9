#include "program/scalars.h"

#include <cmath>
#include <stdexcept>

#include "op/spec.h"

namespace ms_aten {
namespace {

[[noreturn]] void fail(const std::string& fn, const std::string& why) {
  throw std::invalid_argument("scalar " + fn + ": " + why);
}

bool is_integral(const c10::IValue& v) { return v.isInt() || v.isBool(); }

int64_t as_int(const c10::IValue& v) { return v.isBool() ? int64_t{v.toBool()} : v.toInt(); }

double as_double(const c10::IValue& v) { return v.isDouble() ? v.toDouble() : as_int(v); }

bool as_bool(const c10::IValue& v) {
  if (v.isBool()) return v.toBool();
  return v.isInt() ? v.toInt() != 0 : v.toDouble() != 0.0;
}

// Python's floor division and modulo: the quotient rounds toward negative infinity, and the
// remainder takes the divisor's sign.
int64_t floordiv(int64_t a, int64_t b) {
  if (b == 0) throw std::domain_error("integer division by zero");
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t python_mod(int64_t a, int64_t b) {
  if (b == 0) throw std::domain_error("integer modulo by zero");
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

double python_fmod(double a, double b) {
  const double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

int64_t int_pow(int64_t base, int64_t exponent) {
  int64_t result = 1;
  for (int64_t i = 0; i < exponent; ++i) result *= base;
  return result;
}

int64_t wrap_dim(int64_t dim, size_t rank, const std::string& fn) {
  const int64_t r = static_cast<int64_t>(rank);
  if (dim < -r || dim >= std::max<int64_t>(r, 1)) {
    fail(fn, "dim " + std::to_string(dim) + " out of range for rank " + std::to_string(rank));
  }
  return dim < 0 ? dim + r : dim;
}

c10::IValue arithmetic(const std::string& fn, const c10::IValue& a, const c10::IValue& b) {
  if (fn == "truediv") {
    if (as_double(b) == 0.0) throw std::domain_error("division by zero");
    return as_double(a) / as_double(b);
  }
  if (is_integral(a) && is_integral(b)) {
    const int64_t x = as_int(a), y = as_int(b);
    if (fn == "add") return x + y;
    if (fn == "sub") return x - y;
    if (fn == "mul") return x * y;
    if (fn == "floordiv") return floordiv(x, y);
    if (fn == "mod") return python_mod(x, y);
    if (fn == "min") return std::min(x, y);
    if (fn == "max") return std::max(x, y);
    if (fn == "pow") {
      if (y >= 0) return int_pow(x, y);
      return std::pow(static_cast<double>(x), static_cast<double>(y));
    }
  }
  const double x = as_double(a), y = as_double(b);
  if (fn == "add") return x + y;
  if (fn == "sub") return x - y;
  if (fn == "mul") return x * y;
  if (fn == "floordiv") return std::floor(x / y);
  if (fn == "mod") return python_fmod(x, y);
  if (fn == "min") return std::min(x, y);
  if (fn == "max") return std::max(x, y);
  if (fn == "pow") return std::pow(x, y);
  fail(fn, "unknown function");
}

c10::IValue comparison(const std::string& fn, const c10::IValue& a, const c10::IValue& b) {
  if (fn == "and") return as_bool(a) && as_bool(b);
  if (fn == "or") return as_bool(a) || as_bool(b);
  const bool integral = is_integral(a) && is_integral(b);
  const auto compare = [&](auto x, auto y) -> bool {
    if (fn == "eq") return x == y;
    if (fn == "ne") return x != y;
    if (fn == "lt") return x < y;
    if (fn == "le") return x <= y;
    if (fn == "gt") return x > y;
    if (fn == "ge") return x >= y;
    fail(fn, "unknown function");
  };
  return integral ? compare(as_int(a), as_int(b)) : compare(as_double(a), as_double(b));
}

c10::IValue unary(const std::string& fn, const c10::IValue& a) {
  if (fn == "neg") return is_integral(a) ? c10::IValue(-as_int(a)) : c10::IValue(-as_double(a));
  if (fn == "abs") {
    return is_integral(a) ? c10::IValue(std::abs(as_int(a))) : c10::IValue(std::fabs(as_double(a)));
  }
  if (fn == "not") return !as_bool(a);
  if (fn == "float") return as_double(a);
  if (fn == "int") return is_integral(a) ? as_int(a) : static_cast<int64_t>(as_double(a));
  if (fn == "ceil") return static_cast<int64_t>(std::ceil(as_double(a)));
  if (fn == "floor") return static_cast<int64_t>(std::floor(as_double(a)));
  fail(fn, "unknown function");
}

// The functions by arity; size, stride and the rest read a tensor.
bool is_binary(const std::string& fn) {
  static const char* const kNames[] = {"add", "sub", "mul", "floordiv", "mod", "truediv",
                                       "pow", "min", "max", "eq",       "ne",  "lt",
                                       "le",  "gt",  "ge",  "and",      "or"};
  for (const char* name : kNames) {
    if (fn == name) return true;
  }
  return false;
}

bool is_unary(const std::string& fn) {
  static const char* const kNames[] = {"neg", "abs", "not", "float", "int", "ceil", "floor"};
  for (const char* name : kNames) {
    if (fn == name) return true;
  }
  return false;
}

size_t arity(const std::string& fn) {
  if (is_binary(fn) || fn == "size" || fn == "stride") return 2;
  if (is_unary(fn) || fn == "numel" || fn == "storage_offset") return 1;
  if (fn == "ite") return 3;
  fail(fn, "unknown function");
}

}  // namespace

std::vector<int64_t> sizes_of(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().sizes().vec();
  if (value.isIntList()) return value.toIntVector();
  throw std::invalid_argument(std::string("expected a tensor, got a ") + value.tagKind());
}

ScalarOp::ScalarOp(const std::vector<std::string>& words) {
  if (words.size() < 3 || words[0] != "z") {
    throw std::invalid_argument("expected 'z <value> <fn> <operand>...'");
  }
  result_ = static_cast<int>(to_int(words[1]));
  fn_ = words[2];
  if (words.size() - 3 != arity(fn_)) {
    fail(fn_, "takes " + std::to_string(arity(fn_)) + " operands, got " +
                  std::to_string(words.size() - 3));
  }
  for (size_t i = 3; i < words.size(); ++i) {
    const std::string& token = words[i];
    if (token.empty()) fail(fn_, "empty operand");
    if (token[0] == 'z') {
      operands_.push_back({static_cast<int>(to_int(token.substr(1))), {}});
    } else {
      operands_.push_back({-1, constant(token)});
    }
  }
}

std::vector<int> ScalarOp::reads() const {
  std::vector<int> ids;
  for (const Operand& o : operands_) {
    if (o.value >= 0) ids.push_back(o.value);
  }
  return ids;
}

const c10::IValue& ScalarOp::operand(const std::vector<c10::IValue>& values, size_t i) const {
  const Operand& o = operands_[i];
  return o.value >= 0 ? values.at(o.value) : o.constant;
}

c10::IValue ScalarOp::eval(const std::vector<c10::IValue>& values) const {
  const c10::IValue& a = operand(values, 0);
  if (fn_ == "ite") {
    if (a.isNone()) return {};
    return operand(values, as_bool(a) ? 1 : 2);
  }
  if (fn_ == "size" || fn_ == "stride" || fn_ == "numel" || fn_ == "storage_offset") {
    if (a.isTensor()) {
      const at::Tensor& t = a.toTensor();
      if (fn_ == "numel") return t.numel();
      if (fn_ == "storage_offset") return t.storage_offset();
      const int64_t d = wrap_dim(as_int(operand(values, 1)), t.dim(), fn_);
      return fn_ == "size" ? t.size(d) : t.stride(d);
    }
    // Shape inference: a shape, -1 where unknown; MindSpore's buffers are contiguous.
    const std::vector<int64_t> shape = sizes_of(a);
    if (fn_ == "storage_offset") return int64_t{0};
    if (fn_ == "numel") {
      int64_t n = 1;
      for (const int64_t s : shape) {
        if (s < 0) return {};
        n *= s;
      }
      return n;
    }
    const int64_t d = wrap_dim(as_int(operand(values, 1)), shape.size(), fn_);
    if (fn_ == "size") return shape[d] < 0 ? c10::IValue() : c10::IValue(shape[d]);
    int64_t stride = 1;
    for (size_t j = static_cast<size_t>(d) + 1; j < shape.size(); ++j) {
      if (shape[j] < 0) return {};
      stride *= shape[j];
    }
    return stride;
  }
  if (a.isNone()) return {};
  if (is_unary(fn_)) return unary(fn_, a);
  const c10::IValue& b = operand(values, 1);
  if (b.isNone()) return {};
  if (fn_ == "eq" || fn_ == "ne" || fn_ == "lt" || fn_ == "le" || fn_ == "gt" || fn_ == "ge" ||
      fn_ == "and" || fn_ == "or") {
    return comparison(fn_, a, b);
  }
  return arithmetic(fn_, a, b);
}

}  // namespace ms_aten
