"""What exported graphs and real models hand ms_aten.op, against torch eager in both modes:
Python numbers in Tensor slots, omitted trailing optional tensors, torch's own op names and
objects, ops that return nothing, and fake-tensor inference where meta and CPU kernels differ."""
from __future__ import annotations

import mindspore as ms
import pytest
import torch
import torch.nn.functional as F
from test_grad import ms_grads

import ms_aten

from common import assert_same, cotangents, run, set_mode, to_ms, to_torch, torch_grads

g = torch.Generator().manual_seed(11)


def randn(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=dtype)


X = randn(3, 4)
aten = torch.ops.aten

# ---- Python numbers in Tensor slots (torch's wrapped numbers) --------------------------------

# (op, call-time arguments, torch reference): the numbers promote as Python scalars do.
NUMBER_CASES = [
    ("add.Tensor", (randn(4, dtype=torch.float16), 1.0), lambda x, n: x + n),  # stays float16
    ("add.Tensor", (randn(dtype=torch.float16), 1.5), lambda x, n: x + n),  # 0-dim: still f16
    ("add.Tensor", (torch.tensor([True, False]), 1), lambda x, n: x + n),  # bool + int: int64
    ("mul.Tensor", (torch.arange(4, dtype=torch.int32), 0.5), lambda x, n: x * n),  # float32
    ("mul.Tensor", (torch.tensor(3, dtype=torch.int32), 2), lambda x, n: x * n),  # int32 0-dim
    ("sub.Tensor", (2.0, randn(3, dtype=torch.bfloat16)), lambda n, x: n - x),  # number first
    ("div.Tensor", (torch.arange(1, 5), 2), lambda x, n: x / n),  # true division: float32
    ("where.self", (X > 0, X.half(), 0.5), lambda c, x, n: torch.where(c, x, n)),  # not add/mul
    ("add.Tensor", (randn(3, dtype=torch.float64), 0.25), lambda x, n: x + n),
    ("eq.Tensor", (torch.tensor([1.0, 2.0]), 2), lambda x, n: x == n),  # a bool result
]


@pytest.mark.parametrize("name, args, reference", NUMBER_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(NUMBER_CASES)])
def test_numbers_at_call_time_promote_as_torchs_wrapped_numbers(mode, name, args, reference):
    assert_same(run(ms_aten.op(name), to_ms(args), mode), reference(*args))


@pytest.mark.parametrize("name, constants, args, reference", [
    ("add.Tensor", {"other": 1.0}, (randn(4, dtype=torch.float16),), lambda x: x + 1.0),
    ("mul.Tensor", {"other": 3}, (torch.tensor([True, False]),), lambda x: x * 3),
    ("where.self", {"other": -1.0}, (X > 0, X), lambda c, x: torch.where(c, x, -1.0)),
    ("pow.Tensor_Tensor", {"self": 2.0}, (randn(3, dtype=torch.float16),), lambda e: 2.0 ** e),
])
def test_numbers_as_constants_for_tensor_arguments(mode, name, constants, args, reference):
    op = ms_aten.op(name, **constants)
    assert_same(run(op, to_ms(args), mode), reference(*args))


@pytest.mark.parametrize("attr, scalars, activation", [
    ("leaky_relu", [0.2], lambda y: F.leaky_relu(y, 0.2)),
    ("hardtanh", [-0.5, 1], lambda y: F.hardtanh(y, -0.5, 1.0)),  # an int among the numbers
    ("none", [], lambda y: y),
])
def test_a_list_of_optional_numbers_as_a_constant(mode, attr, scalars, activation):
    # Scalar?[]: oneDNN's linear takes its fused activation's parameters as one.
    x, weight, bias = randn(2, 3, 8), randn(5, 8), randn(5)
    op = ms_aten.op("mkldnn::_linear_pointwise", attr=attr, scalars=scalars, algorithm="")
    assert_same(run(op, to_ms((x, weight, bias)), mode),
                activation(F.linear(x, weight, bias)), rtol=1e-5, atol=1e-5)


def test_a_list_of_optional_numbers_refuses_other_items_by_name():
    # The overload without a name is suggested by torch's name for it, not the name given.
    with pytest.raises(TypeError, match=r"(?s)name the overload \(e\.g\. "
                                        r"'mkldnn::_linear_pointwise\.default'\).*"
                                        r"argument 'scalars' .* got \['a'\]"):
        ms_aten.op("mkldnn::_linear_pointwise", attr="leaky_relu", scalars=["a"], algorithm="")
    with pytest.raises(TypeError, match=r"argument 'scalars' .* got \['a'\]"):
        ms_aten.op("mkldnn::_linear_pointwise.default", attr="leaky_relu", scalars=["a"],
                   algorithm="")


def test_a_float64_number_keeps_double_precision_as_a_constant_and_in_pynative():
    # GRAPH mode hands a call-time Python float to kernels as float32 (a MindSpore fact); as a
    # constant, or in PYNATIVE mode, it is the double torch uses.
    x = randn(3, dtype=torch.float64)
    expected = x + 0.1
    assert_same(run(ms_aten.op("add.Tensor", other=0.1), to_ms((x,)), "graph"), expected,
                rtol=0, atol=0)
    assert_same(run(ms_aten.op("add.Tensor"), (to_ms(x), 0.1), "pynative"), expected,
                rtol=0, atol=0)


def test_a_number_goes_to_a_scalar_overload_when_there_is_one():
    assert ms_aten.op("add", other=2.0).binding.name == "aten::add.Scalar"
    assert ms_aten.op("where", self=1.0, other=0.0).binding.name == "aten::where.Scalar"


def test_gradient_with_a_number_at_call_time(mode):
    x = randn(3, 4)
    weight = randn(3, 4)
    (expected,) = torch_grads(lambda t: t * 2.5, (x,), [weight])
    set_mode(mode)

    class Loss(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.mul = ms_aten.op("mul.Tensor")

        def construct(self, t, w):
            return (self.mul(t, 2.5) * w).sum()

    got = ms.grad(Loss(), grad_position=0)(to_ms(x), to_ms(weight))
    torch.testing.assert_close(to_torch(got), expected)


def test_one_op_object_serves_one_call_pattern_outside_the_fast_path():
    op = ms_aten.op("add.Tensor")
    x = to_ms(X)
    assert_same(run(op, (x, 1.0), "graph"), X + 1.0)
    with pytest.raises(TypeError, match=r"'aten::add\.Tensor': this op object was first called "
                                        r"with \(tensor, number\) and now with tensors in every "
                                        r"slot(.|\n)*make another"):
        run(op, (x, x), "graph")
    assert_same(run(op, (x, x), "pynative"), X + X)  # the fast path keeps a kernel per pattern
    assert_same(run(ms_aten.op("add.Tensor"), (x, x), "graph"), X + X)


# ---- omitted trailing optional tensors -------------------------------------------------------

OPTIONAL_CASES = [
    ("layer_norm", {"normalized_shape": [4]}, (X,), lambda x: F.layer_norm(x, [4])),
    ("layer_norm", {"normalized_shape": [4]}, (X, randn(4)),
     lambda x, w: F.layer_norm(x, [4], w)),
    ("binary_cross_entropy_with_logits", {}, (X, torch.rand(3, 4, generator=g)),
     F.binary_cross_entropy_with_logits),
    ("linear", {}, (X, randn(5, 4)), F.linear),
    ("conv2d", {"padding": 1}, (randn(1, 2, 5, 5), randn(3, 2, 3, 3)),
     lambda x, w: F.conv2d(x, w, padding=1)),
]


@pytest.mark.parametrize("name, constants, inputs, reference", OPTIONAL_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(OPTIONAL_CASES)])
def test_trailing_optional_tensors_left_out_are_none(mode, name, constants, inputs, reference):
    op = ms_aten.op(name, **constants)
    expected = reference(*inputs)
    assert_same(run(op, to_ms(inputs), mode), expected, rtol=1e-5, atol=1e-5)
    weights = cotangents((expected,))
    want = torch_grads(reference, inputs, weights)
    got = ms_grads(ms_aten.op(name, **constants), inputs, weights, mode)
    for actual, grad in zip(got, want, strict=True):
        torch.testing.assert_close(to_torch(actual), grad, rtol=1e-5, atol=1e-5)


def test_a_required_tensor_cannot_be_left_out(mode):
    with pytest.raises(TypeError, match=r"'aten::mm' takes 2 tensors \(self, mat2\), got 1"):
        run(ms_aten.op("mm"), to_ms((X,)), mode)


# ---- torch's own names and op objects ---------------------------------------------------------

@pytest.mark.parametrize("name, constants, expected", [
    ("aten::max.default", {}, "aten::max"),
    ("max.default", {}, "aten::max"),
    (aten.max.default, {}, "aten::max"),
    (aten.max, {"dim": 1}, "aten::max.dim"),
    (aten.add.Tensor, {}, "aten::add.Tensor"),
    (aten.add, {"other": 2.0}, "aten::add.Scalar"),
    (aten.leaky_relu, {}, "aten::leaky_relu"),
])
def test_torch_names_and_op_objects(name, constants, expected):
    assert ms_aten.op(name, **constants).binding.name == expected


def test_full_reduction_max_by_its_op_overload(mode):
    assert_same(run(ms_aten.op(aten.max.default), (to_ms(X),), mode), X.max())


def test_an_op_object_that_is_not_an_aten_op_is_refused():
    with pytest.raises(ValueError, match=r"OpOverload \(torch\.ops\.aten\.max\.default\)"):
        ms_aten.op(torch.max)


# ---- ops that return nothing ------------------------------------------------------------------

class AssertThenDouble(ms.nn.Cell):
    """Uses nothing of the assert: GRAPH mode must still run it."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x):
        self.op(x)
        return x * 2


def call_assert(op, x: torch.Tensor, mode: str):
    set_mode(mode)
    return AssertThenDouble(op)(to_ms(x)) if mode == "graph" else op(to_ms(x))


def test_assert_async_passes_and_fails_as_in_torch(mode):
    aten._assert_async(torch.tensor(1.0))
    call_assert(ms_aten.op("_assert_async"), torch.tensor(1.0), mode)
    with pytest.raises(RuntimeError, match=r"aten::_assert_async\.msg: values must be positive"):
        call_assert(ms_aten.op("_assert_async.msg", assert_msg="values must be positive"),
                    torch.tensor(0.0), mode)
    assert_same(run(ms_aten.op("relu"), (to_ms(X),), mode), X.relu())  # the process goes on


def test_assert_tensor_metadata_checks_at_inference(mode):
    # What torch.export emits: dtype, device, layout (torch 2.13's fake impl of the check
    # compares a size list with a torch.Size, so `size=` fails in torch itself).
    ok = ms_aten.op("_assert_tensor_metadata", dtype=torch.float32, device="cpu",
                    layout=torch.strided)
    result = call_assert(ok, X, mode)
    if mode == "pynative":  # the op's own result: an empty placeholder
        assert result.shape == (0,) and result.dtype == ms.bool_
    with pytest.raises(RuntimeError, match=r"'aten::_assert_tensor_metadata'.*dtype mismatch"):
        call_assert(ms_aten.op("_assert_tensor_metadata", dtype=torch.float64), X, mode)


def test_gradient_flows_past_an_assert(mode):
    set_mode(mode)
    grad = ms.grad(AssertThenDouble(ms_aten.op("_assert_async")))(to_ms(torch.tensor(3.0)))
    assert float(grad.asnumpy()) == 2.0


def test_ops_returning_non_tensors_are_refused_without_an_index_error():
    with pytest.raises(TypeError, match=r"no overload of aten::_local_scalar_dense can become "
                                        r"(.|\n)*it returns number; only ops returning tensors"):
        ms_aten.op("_local_scalar_dense")


# ---- inference on fake tensors: meta and CPU kernels that disagree ---------------------------

def test_batch_norm_in_eval_mode_has_the_cpu_kernels_empty_statistics(mode):
    x, w, b, mean, var = randn(2, 3, 4), randn(3), randn(3), randn(3), randn(3).abs()
    expected = aten._native_batch_norm_legit_no_training(x, w, b, mean, var, 0.1, 1e-5)
    assert expected[1].shape == (0,)  # meta says (3,); the CPU kernel and its fake say (0,)
    op = ms_aten.op("_native_batch_norm_legit_no_training", momentum=0.1, eps=1e-5)
    assert_same(run(op, to_ms((x, w, b, mean, var)), mode), tuple(expected))
    nbn = ms_aten.op("native_batch_norm", training=False, momentum=0.1, eps=1e-5)
    assert_same(run(nbn, to_ms((x, w, b, mean, var)), mode),
                tuple(aten.native_batch_norm(x, w, b, mean, var, False, 0.1, 1e-5)))


def test_layer_norm_in_float16_has_the_cpu_kernels_statistics_dtype(mode):
    x, w, b = randn(2, 3, 4).half(), randn(4).half(), randn(4).half()
    expected = aten.native_layer_norm(x, [4], w, b, 1e-5)
    assert expected[1].dtype == torch.float16  # meta says float32; the CPU kernel float16
    op = ms_aten.op("native_layer_norm", normalized_shape=[4], eps=1e-5)
    assert_same(run(op, to_ms((x, w, b)), mode), tuple(expected))


@pytest.mark.parametrize("bag_mode", [0, 1, 2])  # sum, mean, max
def test_embedding_bag_outputs_have_the_cpu_kernels_shapes(mode, bag_mode):
    weight, indices = randn(10, 3), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    offsets = torch.tensor([0, 4])
    expected = aten._embedding_bag(weight, indices, offsets, False, bag_mode)
    op = ms_aten.op("_embedding_bag", mode=bag_mode)
    assert_same(run(op, to_ms((weight, indices, offsets)), mode), tuple(expected))


def test_to_copy_with_a_cpu_device_constant(mode):
    op = ms_aten.op("_to_copy", dtype=torch.float64, device="cpu")
    assert_same(run(op, to_ms((X,)), mode), X.to(torch.float64))


def test_to_copy_to_complex32_names_the_dtype():
    with pytest.raises(TypeError, match=r"'dtype'.*torch\.complex32 has no MindSpore equivalent"):
        ms_aten.op("_to_copy", dtype=torch.complex32)


def test_inference_keeps_ops_without_tensor_inputs_working(mode):
    assert_same(run(ms_aten.op("full", size=[2, 3], fill_value=1.5, device="cpu"), (), mode),
                torch.full((2, 3), 1.5))


@pytest.mark.parametrize("name, constants, reference", [
    ("randn_like", {"device": "cpu"}, lambda x: torch.randn_like(x, device="cpu")),
    ("rand_like", {"dtype": torch.float64}, lambda x: torch.rand_like(x, dtype=torch.float64)),
    ("randint_like", {"high": 10, "device": "cpu"}, lambda x: torch.randint_like(x, 10)),
    ("bernoulli.p", {"p": 0.3}, lambda x: torch.bernoulli(x, 0.3)),
])
def test_random_ops_draw_torchs_stream(mode, name, constants, reference):
    # Kernels draw from torch's default CPU generator, and inference draws nothing (a meta
    # run with device="cpu" used to create, and fill, a real tensor): reseeding torch before
    # the call reproduces torch eager exactly.
    x = torch.zeros(6)
    op, inputs = ms_aten.op(name, **constants), to_ms((x,))
    torch.manual_seed(7)
    expected = reference(x)
    torch.manual_seed(7)
    assert_same(run(op, inputs, mode), expected, rtol=0, atol=0)


def test_as_strided_with_a_storage_offset(mode):
    # A MindSpore tensor is its own compact storage: offsets and strides address its elements.
    x = torch.arange(12.0)
    op = ms_aten.op("as_strided", size=[2, 3], stride=[4, 1], storage_offset=3)
    assert_same(run(op, to_ms((x,)), mode), torch.as_strided(x, (2, 3), (4, 1), 3))
    weights = [randn(2, 3)]
    want = torch_grads(lambda t: torch.as_strided(t, (2, 3), (4, 1), 3), (x,), weights)
    (got,) = ms_grads(op, (x,), weights, mode)
    torch.testing.assert_close(to_torch(got), want[0])
    beyond = ms_aten.op("as_strided", size=[2, 3], stride=[4, 1], storage_offset=8)
    with pytest.raises(RuntimeError, match=r"aten::as_strided: setStorage.*out of bounds for "
                                           r"storage of size 48"):  # found by the kernel
        run(beyond, to_ms((x,)), mode).asnumpy()


def test_index_with_none_holes_in_its_tensor_list():
    # x[:, idx] as exported graphs hold it: index.Tensor(x, [None, idx]). The fast path takes it
    # (gradients included); MindSpore cannot hand a None inside a tuple to a Custom kernel.
    x, idx = randn(3, 4), torch.tensor([2, 0, 3])
    op = ms_aten.op("index.Tensor")
    assert_same(run(op, (to_ms(x), (None, to_ms(idx))), "pynative"), x[:, idx])
    weights = [randn(3, 3)]
    want = torch_grads(lambda t: t[:, idx], (x,), weights)

    class Loss(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.index = ms_aten.op("index.Tensor")

        def construct(self, t, i, w):
            return (self.index(t, (None, i)) * w).sum()

    set_mode("pynative")
    got = ms.grad(Loss(), grad_position=0)(to_ms(x), to_ms(idx), to_ms(weights[0]))
    torch.testing.assert_close(to_torch(got), want[0])
    with pytest.raises(TypeError, match=r"'aten::index\.Tensor': argument 'indices' holds None"
                                        r"(.|\n)*index_select"):
        run(ms_aten.op("index.Tensor"), (to_ms(x), (None, to_ms(idx))), "graph")


def test_none_at_call_time_for_an_optional_tensor():
    x, b = randn(3, 4), randn(4)
    op = ms_aten.op("layer_norm", normalized_shape=[4])
    assert_same(run(op, (to_ms(x), None, to_ms(b)), "pynative"), F.layer_norm(x, [4], None, b))
    with pytest.raises(TypeError, match=r"argument 'weight' is None at call time(.|\n)*the "
                                        r"constant weight=None"):
        run(op, (to_ms(x), None, to_ms(b)), "graph")
    graph_op = ms_aten.op("layer_norm", normalized_shape=[4], weight=None)
    assert_same(run(graph_op, (to_ms(x), to_ms(b)), "graph"), F.layer_norm(x, [4], None, b))
    with pytest.raises(TypeError, match=r"only Tensor\? arguments may be None"):
        run(ms_aten.op("mm"), (to_ms(x), None), "pynative")


def test_pynative_off_the_fast_path_takes_the_same_patterns(monkeypatch):
    # As on a GPU context: PYNATIVE calls go through MindSpore's Custom launch.
    from ms_aten.native import pyboost
    monkeypatch.setattr(pyboost, "available", lambda: False)
    x = randn(3, 4, dtype=torch.float16)
    assert_same(run(ms_aten.op("add.Tensor"), (to_ms(x), 1.5), "pynative"), x + 1.5)
    assert_same(run(ms_aten.op("layer_norm", normalized_shape=[4]), (to_ms(X),), "pynative"),
                F.layer_norm(X, [4]))
    with pytest.raises(ms_aten.ValueDependentError, match=r"aten::nonzero"):
        run(ms_aten.op("nonzero"), (to_ms(X),), "pynative")


def test_second_order_gradients_with_call_patterns(mode):
    # A number at call time and omitted optionals reach the order-2 VJP kernel too.
    x = randn(3, 4)
    set_mode(mode)
    power = ms_aten.op("pow.Tensor_Tensor")
    norm = ms_aten.op("layer_norm", normalized_shape=[4])

    def loss(t):
        return (power(t, 3.0) * 0.5).sum() + (norm(t) * 0.25).sum()

    got = ms.grad(ms.grad(loss))(to_ms(x))
    leaf = x.clone().requires_grad_()
    (first,) = torch.autograd.grad((leaf ** 3.0 * 0.5).sum() + (F.layer_norm(leaf, [4]) * 0.25)
                                   .sum(), leaf, create_graph=True)
    (expected,) = torch.autograd.grad(first.sum(), leaf)
    torch.testing.assert_close(to_torch(got), expected, rtol=1e-4, atol=1e-5)
