// A compiled extension op with a CPU kernel and nothing else: no Meta kernel and no fake
// implementation, so neither torch.export nor ms_aten can know its output shapes without
// running it. tests/test_custom_extension.py checks that ms_aten says what to register.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {
at::Tensor twice(const at::Tensor& x) { return x * 2; }
}  // namespace

TORCH_LIBRARY(ms_aten_no_meta, m) { m.def("twice(Tensor x) -> Tensor"); }

TORCH_LIBRARY_IMPL(ms_aten_no_meta, CPU, m) { m.impl("twice", &twice); }
