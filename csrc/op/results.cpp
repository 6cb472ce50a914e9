#include "op/results.h"

#include <c10/util/StringUtil.h>

#include <stdexcept>
#include <string>

namespace ms_aten {

void copy_into_output(const at::Tensor& output, const at::Tensor& result, size_t index) {
  if (result.sizes() != output.sizes() || result.scalar_type() != output.scalar_type()) {
    throw std::runtime_error(c10::str("output ", index, " came out as ", result.scalar_type(),
                                      result.sizes(), ", but MindSpore expects ",
                                      output.scalar_type(), output.sizes()));
  }
  output.copy_(result);
}

std::vector<at::Tensor> returned_tensors(const std::vector<c10::IValue>& stack) {
  std::vector<at::Tensor> results;
  for (const auto& value : stack) {
    if (value.isTensor()) {
      results.push_back(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorVector()) results.push_back(t);
    } else {
      throw std::runtime_error(std::string("returned a ") + value.tagKind() + ", not tensors");
    }
  }
  return results;
}

}  // namespace ms_aten
