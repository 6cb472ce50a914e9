#include "op/spec.h"

#include <ATen/ScalarOps.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "boundary/bridge_abi.h"
#include "boundary/ms_ext.h"

namespace ms_aten {
namespace {

double to_double(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) throw std::invalid_argument("bad float '" + text + "'");
  return value;
}

}  // namespace

std::string unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      out.push_back(static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  if (text.empty()) return parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, sep)) parts.push_back(part);
  return parts;
}

int64_t to_int(const std::string& text) {
  size_t used = 0;
  const int64_t value = std::stoll(text, &used);
  if (used != text.size()) throw std::invalid_argument("bad int '" + text + "'");
  return value;
}

// A number where the schema takes a Tensor, as torch's Python binding and TorchScript pass one:
// a 0-dim CPU tensor of the number's own kind (double, int64, bool or complex double) marked
// as a wrapped number, so that type promotion treats it as a Python scalar (a float16 tensor
// plus 1.0 stays float16).
at::Tensor wrapped_number(const c10::Scalar& value) {
  at::Tensor tensor = c10::scalar_to_tensor(value);
  tensor.unsafeGetTensorImpl()->set_wrapped_number(true);
  return tensor;
}

namespace {

c10::IValue wrapped_constant(const std::string& body) {
  if (body.empty()) throw std::invalid_argument("'W' needs a number (W then b, i, f or c)");
  const c10::IValue value = constant(body);
  if (value.isBool()) return wrapped_number(value.toBool());
  if (value.isInt()) return wrapped_number(value.toInt());
  if (value.isDouble()) return wrapped_number(value.toDouble());
  if (value.isComplexDouble()) return wrapped_number(value.toComplexDouble());
  throw std::invalid_argument("'W" + body + "' is not a wrapped number (W then b, i, f or c)");
}

// A call-time number's wrapped tensor. Shape inference (csrc/op/infer.cpp) runs on meta tensors,
// whose value cannot be read: any number of the same kind promotes the same way.
at::Tensor wrapped_input(const at::Tensor& input) {
  if (!input.is_meta()) return wrapped_number(input.item());
  const auto type = input.scalar_type();
  if (type == at::kBool) return wrapped_number(false);
  if (at::isComplexType(type)) return wrapped_number(c10::complex<double>(0, 0));
  return at::isFloatingType(type) ? wrapped_number(0.0) : wrapped_number(int64_t{0});
}

}  // namespace

c10::IValue constant(const std::string& token) {
  const char tag = token[0];
  const std::string body = token.substr(1);
  switch (tag) {
    case 'N': return c10::IValue();
    case 'b': return c10::IValue(body == "1");
    case 'i': return c10::IValue(to_int(body));
    case 'f': return c10::IValue(to_double(body));
    case 'c': {
      const auto parts = split(body, ',');
      if (parts.size() != 2) throw std::invalid_argument("bad complex token '" + token + "'");
      return c10::IValue(c10::complex<double>(to_double(parts[0]), to_double(parts[1])));
    }
    case 's': return c10::IValue(unescape(body));
    case 'y': return c10::IValue(ms_dtype_to_scalar_type(body.c_str()));
    case 'W': return wrapped_constant(body);
    case 'd': return c10::IValue(c10::Device(unescape(body)));
    case 'I': {
      std::vector<int64_t> values;
      for (const auto& part : split(body, ',')) values.push_back(to_int(part));
      return c10::IValue(values);
    }
    case 'F': {
      std::vector<double> values;
      for (const auto& part : split(body, ',')) values.push_back(to_double(part));
      return c10::IValue(values);
    }
    case 'B': {
      c10::List<bool> values;
      for (const auto& part : split(body, ',')) values.push_back(part == "1");
      return c10::IValue(values);
    }
    case 'S': {
      c10::impl::GenericList values(c10::OptionalType::create(c10::NumberType::get()));
      for (const auto& part : split(body, '/')) {
        values.push_back(part == "N" ? c10::IValue() : c10::IValue(constant(part).toScalar()));
      }
      return c10::IValue(values);
    }
    default: throw std::invalid_argument("unknown argument token '" + token + "'");
  }
}

namespace {

[[noreturn]] void fail(const std::string& spec, const std::string& why) {
  throw std::invalid_argument("malformed op spec '" + spec + "': " + why);
}

// The members of a T[i,j,..] / Q[i,_,..] token: indices, -1 for `_` (Q only).
std::vector<int> list_members(const std::string& token, bool optional) {
  if (token.size() < 3 || token[1] != '[' || token.back() != ']') {
    throw std::invalid_argument("bad list token '" + token + "'");
  }
  std::vector<int> members;
  for (const auto& part : split(token.substr(2, token.size() - 3), ',')) {
    if (part == "_" && optional) {
      members.push_back(-1);
    } else {
      members.push_back(static_cast<int>(to_int(part)));
    }
  }
  return members;
}

SpecKind parse_kind(const std::string& spec, const std::string& word, int* order) {
  if (word == "call") return SpecKind::kCall;
  if (word == "out") return SpecKind::kOut;
  if (word == "inplace") return SpecKind::kInplace;
  if (word == "bounded") return SpecKind::kBounded;
  if (word == "mutate") return SpecKind::kMutate;
  if (word.rfind("vjp", 0) == 0) {
    const std::string digits = word.substr(3);
    const bool valid =
        digits.empty() ||
        (digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 3);
    *order = !valid ? 0 : digits.empty() ? 1 : std::stoi(digits);
    if (*order >= 1) return SpecKind::kVjp;
  }
  fail(spec, "unknown kind '" + word + "'");
}

}  // namespace

OpCall::OpCall(const std::string& spec) {
  const auto words = split(spec, ' ');
  if (words.size() < 4) fail(spec, "expected '<kind> <op> <overload> <outputs> <args...>'");
  kind_ = parse_kind(spec, words[0], &order_);
  const std::string overload = words[2] == "." ? "" : words[2];
  name_ = words[1] + (overload.empty() ? "" : "." + overload);
  // Only names that torch's dispatcher knows can be called: the spec carries no code.
  op_ = c10::Dispatcher::singleton().findSchema({words[1], overload});
  if (!op_) throw std::invalid_argument("operator " + name_ + " is not registered in torch");
  fixed_outputs_ = words[3] == "*" ? -1 : static_cast<int>(to_int(words[3]));

  const size_t nargs = op_->schema().arguments().size();
  if (words.size() - 4 != nargs) {
    fail(spec, name_ + " takes " + std::to_string(nargs) + " arguments, the spec has " +
                   std::to_string(words.size() - 4));
  }
  try {
    for (size_t i = 4; i < words.size(); ++i) {
      const std::string& token = words[i];
      if (token.empty()) fail(spec, "empty token");
      switch (token[0]) {
        case 't':
        case 'u':
        case 'r':
        case 'w':
          slots_.push_back({token[0] == 'w' ? SlotKind::kWrapped : SlotKind::kTensor,
                            static_cast<int>(to_int(token.substr(1))),
                            {},
                            {},
                            token[0] == 'u',
                            false,
                            token[0] == 'r'});
          ++fixed_inputs_;
          break;
        case 'U':  // a written list names its members: MindSpore must know every buffer
        case 'R':
          if (token.size() == 1) fail(spec, "U and R lists name their members: U[i,j,..]");
          [[fallthrough]];
        case 'T':
        case 'Q': {
          const SlotKind kind = token[0] == 'Q' ? SlotKind::kOptTensorList : SlotKind::kTensorList;
          if (token.size() > 1) {  // T[i,j,..] / Q[i,_,..]
            auto members = list_members(token, kind == SlotKind::kOptTensorList);
            for (const int m : members) fixed_inputs_ += m >= 0;
            has_explicit_list_ = true;
            slots_.push_back(
                {kind, 0, std::move(members), {}, token[0] == 'U', false, token[0] == 'R'});
            break;
          }
          if (has_list_) fail(spec, "more than one variable-length tensor list");
          has_list_ = true;
          list_start_ = fixed_inputs_;
          slots_.push_back({kind, fixed_inputs_, std::nullopt});
          break;
        }
        case 'o':
          slots_.push_back({SlotKind::kOutput, static_cast<int>(to_int(token.substr(1))), {}});
          break;
        case 'z':
        case 'Z':
          slots_.push_back({token[0] == 'z' ? SlotKind::kScalar : SlotKind::kWrappedScalar,
                            static_cast<int>(to_int(token.substr(1))),
                            {}});
          break;
        case 'J': {  // J<a,z3,..>: ints and scalar values
          Slot slot{SlotKind::kIntList, 0, std::vector<int>{}};
          for (const auto& item : split(token.substr(1), ',')) {
            const bool scalar = !item.empty() && item[0] == 'z';
            slot.members->push_back(scalar ? static_cast<int>(to_int(item.substr(1))) : -1);
            slot.ints.push_back(scalar ? 0 : to_int(item));
          }
          slots_.push_back(std::move(slot));
          break;
        }
        case 'L': slots_.push_back({SlotKind::kLaunchDevice, 0, {}}); break;
        case 'D': {
          const auto& arg = op_->schema().arguments()[i - 4];
          if (!arg.default_value()) fail(spec, "argument '" + arg.name() + "' has no default");
          slots_.push_back({SlotKind::kConst, static_cast<int>(constants_.size()), {}});
          constants_.push_back(*arg.default_value());
          break;
        }
        default:
          slots_.push_back({SlotKind::kConst, static_cast<int>(constants_.size()), {}});
          constants_.push_back(constant(token));
      }
    }
  } catch (const std::invalid_argument& e) {
    fail(spec, e.what());
  } catch (const std::out_of_range& e) {
    fail(spec, e.what());
  }
  if (has_list_ && fixed_outputs_ < 0) fail(spec, "both the inputs and the outputs vary in number");
  if (kind_ == SpecKind::kBounded && fixed_outputs_ < 1) {
    fail(spec, "a bounded call needs a fixed number of outputs");
  }
  // Indices after a variable-length run shift by its length; explicit ones never do.
  if (has_list_ && has_explicit_list_) fail(spec, "a variable-length list beside explicit ones");
  check_writes(spec);
}

void OpCall::check_writes(const std::string& spec) {
  const auto& arguments = op_->schema().arguments();
  bool any_written = false;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    const auto& alias = arguments[i].alias_info();
    const bool schema_writes = alias && alias->isWrite();
    any_written |= slot.written;
    if (slot.written && kind_ != SpecKind::kMutate && kind_ != SpecKind::kCall) {
      fail(spec, "written tensors (u, U tokens) need the 'mutate' or 'call' kind");
    }
    // A call writes only what its spec says it writes (a program node: program/program.h).
    if (kind_ == SpecKind::kCall && schema_writes && !slot.written) {
      fail(spec, name_ + " writes argument '" + arguments[i].name() + "': mark it u<j>");
    }
    if (slot.written && !schema_writes) {
      fail(spec, "argument '" + arguments[i].name() + "' is marked written, but " + name_ +
                     " does not write it");
    }
    if (slot.unwritten && (kind_ != SpecKind::kMutate || !schema_writes)) {
      fail(spec, "argument '" + arguments[i].name() + "' is marked unwritten (r, R tokens), " +
                     "which a mutate spec says of an argument its op's schema writes");
    }
    const bool tensor = slot.kind == SlotKind::kTensor || slot.kind == SlotKind::kTensorList;
    slot.copy_first =
        kind_ == SpecKind::kMutate && schema_writes && !slot.written && !slot.unwritten && tensor;
  }
  if (kind_ != SpecKind::kMutate) return;
  if (!any_written) fail(spec, "a mutate spec marks the tensors the op writes (u, U tokens)");
  // MindSpore gives the kernel one placeholder output; what the op returns (nothing, or aliases
  // of what it wrote) is not copied anywhere.
  if (fixed_outputs_ != 0) fail(spec, "a mutate spec has output count 0 (a placeholder)");
}

namespace {

// The order-k VJP takes m(k) tensors and returns m(k-1), where m(-1) = the forward's outputs,
// m(0) = its inputs and m(j) = m(j-1) + m(j-2). Each m(j) is a(j) * inputs + b(j) * outputs;
// returns {a, b} of m(k-1), m(k) and m(k+1).
std::array<std::pair<int64_t, int64_t>, 3> vjp_counts(int order) {
  int64_t a_prev = 0, b_prev = 1, a = 1, b = 0;  // m(-1), m(0)
  for (int j = 0; j < order; ++j) {
    std::tie(a_prev, b_prev, a, b) = std::make_tuple(a, b, a + a_prev, b + b_prev);
  }
  return {{{a_prev, b_prev}, {a, b}, {a + a_prev, b + b_prev}}};
}

}  // namespace

bool OpCall::vjp_tensor_counts(int64_t total, int64_t a, int64_t b, int64_t* n_in,
                               int64_t* n_out) const {
  // One of the two counts is fixed by the spec; the other follows from total = a*in + b*out.
  *n_in = fixed_inputs_;
  *n_out = fixed_outputs_;
  if (has_list_) {
    *n_in = (total - b * *n_out) % a == 0 ? (total - b * *n_out) / a : -1;
  } else if (*n_out < 0) {
    *n_out = b != 0 && (total - a * *n_in) % b == 0 ? (total - a * *n_in) / b : -1;
  }
  return *n_in >= 0 && *n_out >= 0 && a * *n_in + b * *n_out == total;
}

int OpCall::input_count(int nparam) const {
  if (kind_ == SpecKind::kVjp) {  // nparam = m(k+1): the VJP's inputs, then its outputs
    const auto counts = vjp_counts(order_);
    int64_t n_in = 0, n_out = 0;
    if (!vjp_tensor_counts(nparam, counts[2].first, counts[2].second, &n_in, &n_out)) return -1;
    return static_cast<int>(counts[1].first * n_in + counts[1].second * n_out);
  }
  if (kind_ == SpecKind::kBounded) return nparam - 2 * fixed_outputs_;  // padded, then shapes
  if (returns_nothing()) return nparam - 1;                             // one placeholder output
  return fixed_outputs_ >= 0 ? nparam - fixed_outputs_ : fixed_inputs_;
}

int OpCall::vjp_output_count(int vjp_inputs) const {
  const auto counts = vjp_counts(order_);
  int64_t n_in = 0, n_out = 0;
  if (!vjp_tensor_counts(vjp_inputs, counts[1].first, counts[1].second, &n_in, &n_out)) return -1;
  return static_cast<int>(counts[0].first * n_in + counts[0].second * n_out);
}

int OpCall::input_index(int slot_index, int list_len) const {
  return has_list_ && slot_index >= list_start_ ? slot_index + list_len
                                                : slot_index;  // after the list
}

int OpCall::input_of_argument(const std::string& name, int n_inputs) const {
  const auto& arguments = op_->schema().arguments();
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (arguments[i].name() != name || slots_[i].kind != SlotKind::kTensor) continue;
    return input_index(slots_[i].index, n_inputs - fixed_inputs_);
  }
  return -1;
}

std::vector<c10::IValue> OpCall::stack(const std::vector<at::Tensor>& inputs,
                                       const std::vector<at::Tensor>& outputs) const {
  const int list_len = static_cast<int>(inputs.size()) - fixed_inputs_;
  if (list_len < 0 || (!has_list_ && list_len != 0)) {
    throw std::invalid_argument("expects " + std::to_string(fixed_inputs_) +
                                (has_list_ ? " or more" : "") + " tensors, got " +
                                std::to_string(inputs.size()));
  }
  std::vector<c10::IValue> stack;
  fill(stack, inputs, list_len, outputs, std::nullopt);
  return stack;
}

std::vector<c10::IValue> OpCall::stack_over(const std::vector<c10::IValue>& values,
                                            c10::Device device) const {
  std::vector<c10::IValue> stack;
  fill(stack, values, 0, {}, device);
  return stack;
}

bool OpCall::writes() const {
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.written; });
}

bool OpCall::explicit_slots() const {
  for (const Slot& slot : slots_) {
    const bool list = slot.kind == SlotKind::kTensorList || slot.kind == SlotKind::kOptTensorList;
    if (slot.kind == SlotKind::kOutput || (list && !slot.members)) return false;
  }
  return true;
}

std::vector<int> OpCall::value_indices() const {
  std::vector<int> indices;
  for (const Slot& slot : slots_) {
    if (slot.kind == SlotKind::kTensor || slot.kind == SlotKind::kWrapped ||
        slot.kind == SlotKind::kScalar || slot.kind == SlotKind::kWrappedScalar) {
      indices.push_back(slot.index);
    }
    if (slot.members) {
      for (const int m : *slot.members) {
        if (m >= 0) indices.push_back(m);
      }
    }
  }
  return indices;
}

namespace {

const at::Tensor& tensor_at(const std::vector<at::Tensor>& values, size_t i) {
  return values.at(i);
}
const at::Tensor& tensor_at(const std::vector<c10::IValue>& values, size_t i) {
  return values.at(i).toTensor();
}

// Only a program's value table holds scalars.
const c10::IValue& scalar_at(const std::vector<at::Tensor>& /*values*/, size_t /*i*/) {
  throw std::invalid_argument("z<j> and J<..> tokens name a program's scalar values");
}
const c10::IValue& scalar_at(const std::vector<c10::IValue>& values, size_t i) {
  return values.at(i);
}

}  // namespace

template <class Values>
void OpCall::fill(std::vector<c10::IValue>& stack, const Values& inputs, int list_len,
                  const std::vector<at::Tensor>& outputs, std::optional<c10::Device> device) const {
  stack.reserve(slots_.size());
  for (const Slot& slot : slots_) {
    switch (slot.kind) {
      case SlotKind::kConst: stack.push_back(constants_[slot.index]); break;
      case SlotKind::kOutput: stack.emplace_back(outputs.at(slot.index)); break;
      case SlotKind::kTensor: {
        // Tensors after the list shift by its length.
        const at::Tensor& input = tensor_at(inputs, input_index(slot.index, list_len));
        stack.emplace_back(slot.copy_first ? input.clone() : input);
        break;
      }
      case SlotKind::kWrapped:
        stack.emplace_back(wrapped_input(tensor_at(inputs, input_index(slot.index, list_len))));
        break;
      case SlotKind::kTensorList: {
        c10::List<at::Tensor> list;
        const auto member = [&](const at::Tensor& t) { return slot.copy_first ? t.clone() : t; };
        if (slot.members) {
          for (const int m : *slot.members) list.push_back(member(tensor_at(inputs, m)));
        } else {
          for (int i = 0; i < list_len; ++i)
            list.push_back(member(tensor_at(inputs, slot.index + i)));
        }
        stack.emplace_back(std::move(list));
        break;
      }
      case SlotKind::kOptTensorList: {
        c10::List<std::optional<at::Tensor>> list;
        if (slot.members) {
          for (const int m : *slot.members) {
            list.push_back(m >= 0 ? std::optional<at::Tensor>(tensor_at(inputs, m)) : std::nullopt);
          }
        } else {
          for (int i = 0; i < list_len; ++i) list.push_back(tensor_at(inputs, slot.index + i));
        }
        stack.emplace_back(std::move(list));
        break;
      }
      case SlotKind::kScalar: stack.push_back(scalar_at(inputs, slot.index)); break;
      case SlotKind::kWrappedScalar:
        stack.emplace_back(wrapped_number(scalar_at(inputs, slot.index).toScalar()));
        break;
      case SlotKind::kIntList: {
        std::vector<int64_t> list(slot.ints);
        for (size_t i = 0; i < list.size(); ++i) {
          const int member = (*slot.members)[i];
          if (member >= 0) list[i] = scalar_at(inputs, member).toInt();
        }
        stack.emplace_back(std::move(list));
        break;
      }
      case SlotKind::kLaunchDevice:
        if (!device) throw std::invalid_argument("an L token (the launch's device) is a program's");
        stack.emplace_back(*device);
        break;
    }
  }
}

}  // namespace ms_aten

// For ms_aten/ops/infer.py, through ctypes: marks the 0-dim tensor behind `tensor_impl` (a torch
// Tensor's _cdata) as a wrapped number, as the w<j> and W tokens make theirs; torch has no
// Python call for it. Returns 0, or 1 when it is not a 0-dim tensor.
extern "C" MS_ATEN_C_API int ms_aten_mark_wrapped_number(void* tensor_impl) {
  auto* impl = static_cast<c10::TensorImpl*>(tensor_impl);
  if (impl == nullptr || impl->dim() != 0) return 1;
  impl->set_wrapped_number(true);
  return 0;
}
