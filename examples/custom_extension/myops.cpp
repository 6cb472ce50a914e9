// myops: a PyTorch C++ extension in the torch_npu tutorial's shape, run by MindSpore through
// ms_aten with nothing changed.
//
//   python -m ms_aten.build examples/custom_extension/myops.cpp -o myops.so
//   torch.ops.load_library("myops.so")
//   ms_aten.op("myops::my_op")        # a MindSpore primitive, gradients through my_op_backward
//
// Each op has a schema (TORCH_LIBRARY), a CPU kernel, a Meta kernel that gives output shapes
// without computing (graph capture and MindSpore's shape inference run it), and, for the two
// forward ops, an autograd Function registered for the Autograd key that binds their backward.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <tuple>
#include <vector>

namespace myops {
namespace {

// Runs of the backward kernels, so a test can see that gradients went through them.
std::atomic<int64_t> backward_runs{0};

void check_same_shape(const char* op, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(), op,
              ": the tensors must have one shape and dtype, got ", a.scalar_type(), a.sizes(),
              " and ", b.scalar_type(), b.sizes());
}

// Applies `f(i)` to every element index of contiguous tensors, in parallel.
template <typename F>
void for_each_index(int64_t n, F f) {
  at::parallel_for(0, n, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

// ---- The math: plain loops over contiguous buffers ----

// my_op(x, gate) = x * sigmoid(gate), a gated unit.
at::Tensor my_op_cpu(const at::Tensor& x, const at::Tensor& gate) {
  check_same_shape("myops::my_op", x, gate);
  auto xc = x.contiguous(), gc = gate.contiguous();
  auto out = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "myops::my_op", [&] {
    const scalar_t *xs = xc.const_data_ptr<scalar_t>(), *gs = gc.const_data_ptr<scalar_t>();
    scalar_t* os = out.mutable_data_ptr<scalar_t>();
    for_each_index(xc.numel(), [&](int64_t i) { os[i] = xs[i] / (1 + std::exp(-gs[i])); });
  });
  return out;
}

// d x = grad * s, d gate = grad * x * s * (1 - s), with s = sigmoid(gate).
std::tuple<at::Tensor, at::Tensor> my_op_backward_cpu(const at::Tensor& grad, const at::Tensor& x,
                                                      const at::Tensor& gate) {
  check_same_shape("myops::my_op_backward", x, gate);
  check_same_shape("myops::my_op_backward", grad, x);
  ++backward_runs;
  auto xc = x.contiguous(), gc = gate.contiguous(), dc = grad.contiguous();
  auto grad_x = at::empty_like(xc), grad_gate = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "myops::my_op_backward", [&] {
    const scalar_t *xs = xc.const_data_ptr<scalar_t>(), *gs = gc.const_data_ptr<scalar_t>(),
                   *ds = dc.const_data_ptr<scalar_t>();
    scalar_t *dx = grad_x.mutable_data_ptr<scalar_t>(),
             *dg = grad_gate.mutable_data_ptr<scalar_t>();
    for_each_index(xc.numel(), [&](int64_t i) {
      scalar_t s = 1 / (1 + std::exp(-gs[i]));
      dx[i] = ds[i] * s;
      dg[i] = ds[i] * xs[i] * s * (1 - s);
    });
  });
  return {grad_x, grad_gate};
}

// quantize = clamp(round(x * scale + offset), qmin, qmax) in one pass: the Torch-AIE tutorial's
// mul -> add -> round -> clamp subgraph fused. Each step rounds to the input's dtype, as the four
// ATen ops do, so the results are identical; round is half to even, as torch.round.
at::Tensor quantize_cpu(const at::Tensor& x, double scale, double offset, double qmin,
                        double qmax) {
  auto xc = x.contiguous();
  auto out = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "myops::quantize", [&] {
    const scalar_t* xs = xc.const_data_ptr<scalar_t>();
    scalar_t* os = out.mutable_data_ptr<scalar_t>();
    const scalar_t s = scale, o = offset, lo = qmin, hi = qmax;
    for_each_index(xc.numel(), [&](int64_t i) {
      scalar_t scaled = xs[i] * s;
      os[i] = std::min(std::max(std::nearbyint(scaled + o), lo), hi);
    });
  });
  return out;
}

// The straight-through estimator of quantization-aware training: round passes the gradient
// through unchanged, clamp stops it outside [qmin, qmax]; d x = grad * scale inside.
at::Tensor quantize_backward_cpu(const at::Tensor& grad, const at::Tensor& x, double scale,
                                 double offset, double qmin, double qmax) {
  check_same_shape("myops::quantize_backward", grad, x);
  ++backward_runs;
  auto xc = x.contiguous(), dc = grad.contiguous();
  auto grad_x = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "myops::quantize_backward", [&] {
    const scalar_t *xs = xc.const_data_ptr<scalar_t>(), *ds = dc.const_data_ptr<scalar_t>();
    scalar_t* dx = grad_x.mutable_data_ptr<scalar_t>();
    const scalar_t s = scale, o = offset, lo = qmin, hi = qmax;
    for_each_index(xc.numel(), [&](int64_t i) {
      scalar_t scaled = xs[i] * s;
      scalar_t shifted = scaled + o;
      dx[i] = shifted >= lo && shifted <= hi ? ds[i] * s : scalar_t(0);
    });
  });
  return grad_x;
}

int64_t backward_calls() { return backward_runs.load(); }

// ---- Meta kernels: shapes and dtypes only, for graph capture and shape inference ----

at::Tensor my_op_meta(const at::Tensor& x, const at::Tensor& gate) {
  check_same_shape("myops::my_op", x, gate);
  return at::empty_like(x);
}

std::tuple<at::Tensor, at::Tensor> my_op_backward_meta(const at::Tensor& grad, const at::Tensor& x,
                                                       const at::Tensor& gate) {
  check_same_shape("myops::my_op_backward", x, gate);
  check_same_shape("myops::my_op_backward", grad, x);
  return {at::empty_like(x), at::empty_like(x)};
}

at::Tensor quantize_meta(const at::Tensor& x, double, double, double, double) {
  return at::empty_like(x);
}

at::Tensor quantize_backward_meta(const at::Tensor& grad, const at::Tensor& x, double, double,
                                  double, double) {
  check_same_shape("myops::quantize_backward", grad, x);
  return at::empty_like(x);
}

// ---- Autograd: each forward op's backward is its own backward op, called by the dispatcher ----

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dispatcher's typed handle of one of this library's ops.
template <typename Signature>
c10::TypedOperatorHandle<Signature> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

class MyOpFunction : public torch::autograd::Function<MyOpFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& gate) {
    ctx->save_for_backward({x, gate});
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // on to the CPU or Meta kernel
    static auto op = handle<at::Tensor(const at::Tensor&, const at::Tensor&)>("myops::my_op");
    return op.call(x, gate);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    static auto op = handle<std::tuple<at::Tensor, at::Tensor>(
        const at::Tensor&, const at::Tensor&, const at::Tensor&)>("myops::my_op_backward");
    auto [grad_x, grad_gate] = op.call(grads[0], saved[0], saved[1]);
    return {grad_x, grad_gate};
  }
};

class QuantizeFunction : public torch::autograd::Function<QuantizeFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double scale, double offset,
                            double qmin, double qmax) {
    ctx->save_for_backward({x});
    ctx->saved_data["constants"] = std::vector<double>{scale, offset, qmin, qmax};
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static auto op =
        handle<at::Tensor(const at::Tensor&, double, double, double, double)>("myops::quantize");
    return op.call(x, scale, offset, qmin, qmax);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto c = ctx->saved_data["constants"].toDoubleVector();
    static auto op =
        handle<at::Tensor(const at::Tensor&, const at::Tensor&, double, double, double, double)>(
            "myops::quantize_backward");
    auto grad_x = op.call(grads[0], ctx->get_saved_variables()[0], c[0], c[1], c[2], c[3]);
    return {grad_x, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};  // none for numbers
  }
};

at::Tensor my_op_autograd(const at::Tensor& x, const at::Tensor& gate) {
  return MyOpFunction::apply(x, gate);
}

at::Tensor quantize_autograd(const at::Tensor& x, double scale, double offset, double qmin,
                             double qmax) {
  return QuantizeFunction::apply(x, scale, offset, qmin, qmax);
}

}  // namespace

TORCH_LIBRARY(myops, m) {
  m.def("my_op(Tensor x, Tensor gate) -> Tensor");
  m.def("my_op_backward(Tensor grad, Tensor x, Tensor gate) -> (Tensor, Tensor)");
  m.def("quantize(Tensor x, float scale, float offset, float qmin, float qmax) -> Tensor");
  m.def(
      "quantize_backward(Tensor grad, Tensor x, float scale, float offset, float qmin, "
      "float qmax) -> Tensor");
  m.def("backward_calls() -> int", &backward_calls);  // no tensors: one kernel for every key
}

TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("my_op", &my_op_cpu);
  m.impl("my_op_backward", &my_op_backward_cpu);
  m.impl("quantize", &quantize_cpu);
  m.impl("quantize_backward", &quantize_backward_cpu);
}

TORCH_LIBRARY_IMPL(myops, Meta, m) {
  m.impl("my_op", &my_op_meta);
  m.impl("my_op_backward", &my_op_backward_meta);
  m.impl("quantize", &quantize_meta);
  m.impl("quantize_backward", &quantize_backward_meta);
}

TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  m.impl("my_op", &my_op_autograd);
  m.impl("quantize", &quantize_autograd);
}

}  // namespace myops
