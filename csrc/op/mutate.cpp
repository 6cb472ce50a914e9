#include "op/mutate.h"

namespace ms_aten {

void run_mutate(const OpCall& call, const std::vector<at::Tensor>& inputs) {
  c10::InferenceMode guard;
  // The views share MindSpore's memory and their storages cannot grow: an op that would resize
  // a written tensor throws here instead of writing memory MindSpore never sees.
  auto stack = call.stack(inputs, {});
  call.op().callBoxed(stack);
}

}  // namespace ms_aten
