#include "op/bounded.h"

#include <stdexcept>

#include "op/results.h"

namespace ms_aten {

void run_bounded(const OpCall& call, const std::vector<at::Tensor>& inputs,
                 const std::vector<at::Tensor>& outputs) {
  c10::InferenceMode guard;
  auto stack = call.stack(inputs, {});
  call.op().callBoxed(stack);
  const auto results = returned_tensors(stack);
  const size_t n = outputs.size() / 2;
  if (results.size() != n || outputs.size() % 2 != 0) {
    throw std::runtime_error("returned " + std::to_string(results.size()) + " tensors for " +
                             std::to_string(outputs.size()) + " padded and shape outputs");
  }
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& result = results[i];
    const at::Tensor& shape = outputs[n + i];
    at::Tensor corner = outputs[i];
    bool fits = result.dim() == corner.dim() && result.scalar_type() == corner.scalar_type() &&
                shape.scalar_type() == at::kLong && shape.numel() == result.dim();
    for (int64_t d = 0; fits && d < result.dim(); ++d) {
      fits = result.size(d) <= corner.size(d);
      if (fits) corner = corner.narrow(d, 0, result.size(d));
    }
    if (!fits) {
      throw std::runtime_error(c10::str("output ", i, " came out as ", result.scalar_type(),
                                        result.sizes(), ", which does not fit its bound ",
                                        outputs[i].scalar_type(), outputs[i].sizes()));
    }
    corner.copy_(result);
    shape.copy_(at::tensor(result.sizes(), at::kLong));
  }
}

}  // namespace ms_aten
