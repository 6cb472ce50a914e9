// Output shapes and dtypes of an op spec, from running its op on meta tensors: the torch half
// of MindSpore's C++ inference hooks (extra_abi0.cpp holds the MindSpore half) and of
// ms_aten.op's own inference (ms_aten/ops/infer.py).
//
// Unknown sizes (MindSpore's -1) are run twice, as two placeholder sizes: an output size that
// follows the placeholder is unknown (-1), one that does not is static. An input of unknown
// rank (MindSpore's [-2]) makes every output's rank unknown; the op is probed at ranks 1..5 for
// the output count and dtypes. Results are cached per spec and input signature.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ms_aten {

// One tensor as inference sees it.
struct TensorMeta {
  int64_t rank = 0;           // -1: unknown rank
  std::vector<int64_t> dims;  // `rank` sizes, -1 for an unknown one
  at::ScalarType dtype = at::kFloat;
};

// The op cannot say its output shape before it runs (no meta kernel: nonzero, unique, ...).
class Unknowable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The outputs of `spec` (a call or vjp spec; a ';' and what follows are ignored) for `inputs`.
// Throws Unknowable, or std::runtime_error naming the op and the input shapes.
std::vector<TensorMeta> infer(const std::string& spec, const std::vector<TensorMeta>& inputs);

// infer(), noting the input dtypes for `site` (an op object's ms_aten_uid, or -1): Python
// calls it right before MindSpore infers a call (ms_aten/ops/infer.py).
std::vector<TensorMeta> infer_at(const std::string& spec, int64_t site,
                                 const std::vector<TensorMeta>& inputs);
// MindSpore's C++ shape hook passes input shapes, but neither their number nor their dtypes:
// both come from what infer_at noted for the site (see infer.cpp).
std::vector<TensorMeta> infer_shapes(const std::string& spec, int64_t site, const int* ndims,
                                     const int64_t* const* shapes);

}  // namespace ms_aten
