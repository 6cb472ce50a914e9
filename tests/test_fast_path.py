"""The PYNATIVE fast path (ms_aten.fast_path, csrc/pyboost/fast_path.cpp): same results as the
Custom(aot) route and as torch, gradients equal to torch autograd, kernel errors that surface
and leave the process working."""
from __future__ import annotations

import re

import mindspore as ms
import pytest
import torch
import torch.nn.functional as F
from mindspore import mint

import ms_aten
from ms_aten.native import pyboost
from ms_aten.ops import fast_path

from common import (
    as_tuple,
    cotangents,
    flat,
    randn,
    record_calls,
    regroup,
    set_mode,
    to_ms,
    to_torch,
    torch_grads,
)

X = randn(3, 4)

# (ms_aten name, constants, call-time inputs (a tuple for a Tensor[]), torch reference)
CASES = [
    ("leaky_relu", {"negative_slope": 0.2}, (randn(8),), lambda x: F.leaky_relu(x, 0.2)),
    ("add.Tensor", {}, (randn(3, 1), randn(4)), torch.add),
    ("max.dim", {"dim": 1}, (X,), lambda x: tuple(x.max(1))),
    ("cat", {"dim": 0}, ((X, randn(2, 4)),), lambda xs: torch.cat(xs, 0)),
    ("sum", {}, (X,), torch.sum),  # 0-dim output
    ("relu", {}, (randn(0, 3),), torch.relu),  # zero-size
    # int64, and a 0-dim input
    ("add.Tensor", {}, (torch.arange(6).reshape(2, 3), torch.tensor(5)), torch.add),
    ("mul.Tensor", {}, (randn(5, dtype=torch.bfloat16), randn(5, dtype=torch.bfloat16)), torch.mul),
]
IDS = [f"{name}-{i}" for i, (name, *_) in enumerate(CASES)]


@pytest.fixture(autouse=True)
def pynative(request):
    """PYNATIVE mode; a skip when the module is not built, except for the fallback tests."""
    if "unbuilt" not in request.fixturenames and not pyboost.available():
        pytest.skip("fast-path module not built (python -m ms_aten.native.pyboost)")
    set_mode("pynative")


@pytest.fixture
def unbuilt(monkeypatch, tmp_path):
    """fast_path looks for its module in an empty directory."""
    monkeypatch.setattr(pyboost, "MODULE_PATH", tmp_path / "missing.so")
    pyboost._module.cache_clear()
    yield
    pyboost._module.cache_clear()  # before monkeypatch restores the path: re-read then


@pytest.mark.parametrize("name, constants, inputs, reference", CASES, ids=IDS)
def test_forward_matches_aot_and_torch(name, constants, inputs, reference):
    op = ms_aten.op(name, **constants)
    args = to_ms(inputs)

    @ms.jit
    def aot_call(*xs):  # compiled: the op's AOT kernel, where a call from Python is fast_path's
        return op(*xs)
    fast = fast_path.call(op, *args)
    aot = aot_call(*args)
    assert type(fast) is type(aot)  # a lone output is a Tensor, several are a tuple
    expected = as_tuple(reference(*inputs))
    for f, a, e in zip(as_tuple(fast), as_tuple(aot), expected, strict=True):
        assert f.shape == a.shape and f.dtype == a.dtype
        torch.testing.assert_close(to_torch(f), to_torch(a), rtol=0, atol=0)
        torch.testing.assert_close(to_torch(f), e, rtol=0, atol=0)


def test_a_graph_mode_call_outside_any_graph_takes_the_fast_path(monkeypatch):
    """GRAPH mode runs an op called from Python at once, as PYNATIVE does: through the fast
    path; inside ms.jit the op is compiled, on its AOT kernel. Both equal torch's, in both
    dtypes, 0-dim and zero-size inputs too."""
    taken = record_calls(monkeypatch, fast_path, "call")
    set_mode("graph")
    op = ms_aten.op("leaky_relu", negative_slope=0.2)

    @ms.jit
    def jitted(x):
        return op(x)
    for x in (randn(8), randn(3, 4, dtype=torch.bfloat16), torch.tensor(-2.0), randn(0, 3)):
        want = F.leaky_relu(x, 0.2)
        torch.testing.assert_close(to_torch(op(to_ms(x))), want, rtol=0, atol=0)
        torch.testing.assert_close(to_torch(jitted(to_ms(x))), want, rtol=0, atol=0)
    assert taken == [op] * 4


def test_repeated_calls_reuse_the_cached_outputs_per_signature():
    op = ms_aten.op("relu")
    for shape in [(2, 3), (4,), (2, 3)]:
        x = randn(*shape)
        torch.testing.assert_close(to_torch(fast_path.call(op, to_ms(x))), x.relu())
    assert len(getattr(op, fast_path.STATE_ATTR).outputs) == 2


def test_views_as_inputs():
    op = ms_aten.op("mul.Tensor")
    x = randn(3, 4)
    transposed = to_ms(x).transpose(1, 0)  # strided: the fast path makes it contiguous first
    torch.testing.assert_close(to_torch(fast_path.call(op, transposed, transposed)), x.t() * x.t())
    rows, columns = to_ms(x)[1:], to_ms(x)[:, 1:3]  # a storage offset; offset and strides
    torch.testing.assert_close(to_torch(fast_path.call(op, rows, rows)), x[1:] * x[1:])
    torch.testing.assert_close(to_torch(fast_path.call(op, columns, columns)), x[:, 1:3] ** 2)


def test_chained_with_native_ops_runs_in_queue_order():
    # Each call reads what the previous one (fast path or native) wrote. The kernel must launch
    # in MindSpore's device task, as native CPU kernels do, or it races with them.
    relu, mul = ms_aten.op("relu"), ms_aten.op("mul.Tensor")
    x = randn(1000)
    xm = to_ms(x)
    results = [fast_path.call(mul, mint.mul(fast_path.call(relu, xm), 2.0), xm) for _ in range(100)]
    for result in results:
        torch.testing.assert_close(to_torch(result), x.relu() * 2 * x)


# ---- gradients --------------------------------------------------------------------------

GRAD_CASES = [
    ("leaky_relu", {"negative_slope": 0.2}, (randn(8),), lambda x: F.leaky_relu(x, 0.2)),
    ("add.Tensor", {}, (randn(3, 1), randn(4)), torch.add),
    ("max.dim", {"dim": 1}, (X,), lambda x: tuple(x.max(1))),
    ("cat", {"dim": 0}, ((X, randn(2, 4)),), lambda xs: torch.cat(xs, 0)),
    ("sum", {}, (X,), torch.sum),
    ("gather", {"dim": 1}, (X, torch.tensor([[0, 2], [1, 3], [2, 0]])),
     lambda x, i: x.gather(1, i)),
]


def fast_grads(op, inputs, weights) -> list:
    ms_weights = [to_ms(w) if w is not None else None for w in weights]

    def loss(*flat_args):
        outputs = as_tuple(fast_path.call(op, *regroup(list(flat_args), inputs)))
        return sum((o * w).sum() for o, w in zip(outputs, ms_weights, strict=True) if w is not None)

    args = to_ms(flat(inputs))
    grads = ms.grad(loss, grad_position=tuple(range(len(args))))(*args)
    return list(grads) if len(args) > 1 else [grads]


@pytest.mark.parametrize("name, constants, inputs, reference", GRAD_CASES,
                         ids=[c[0] for c in GRAD_CASES])
def test_gradient_matches_torch_autograd(name, constants, inputs, reference):
    weights = cotangents(as_tuple(reference(*inputs)))
    expected = torch_grads(reference, inputs, weights)
    got = fast_grads(ms_aten.op(name, **constants), inputs, weights)
    assert len(got) == len(expected)
    for actual, want in zip(got, expected, strict=True):
        torch.testing.assert_close(to_torch(actual), want, rtol=1e-5, atol=1e-5)


def test_gradient_flows_through_a_chain_of_fast_path_and_native_ops():
    # Gradients pass from one backward kernel to the next and are summed where a tensor is used
    # twice (t feeds relu and mul): every step reads the previous step's output.
    relu, mul = ms_aten.op("relu"), ms_aten.op("mul.Tensor")
    x = randn(1000)
    grad = ms.grad(lambda t: fast_path.call(mul, mint.mul(fast_path.call(relu, t), 2.0), t).sum())
    results = [grad(to_ms(x)) for _ in range(20)]
    leaf = x.clone().requires_grad_()
    (want,) = torch.autograd.grad((leaf.relu() * 2 * leaf).sum(), leaf)
    for got in results:
        torch.testing.assert_close(to_torch(got), want)


def test_gradient_of_a_gradient_matches_torch_autograd():
    # The backward records its own backward (the second-order VJP kernel) when MindSpore
    # differentiates it again; tests/test_grad.py covers more ops and both modes.
    op = ms_aten.op("leaky_relu", negative_slope=0.2)
    got = ms.grad(ms.grad(lambda t: (fast_path.call(op, t) ** 2).sum()))(to_ms(X))
    leaf = X.clone().requires_grad_()
    (first,) = torch.autograd.grad((F.leaky_relu(leaf, 0.2) ** 2).sum(), leaf, create_graph=True)
    (want,) = torch.autograd.grad(first.sum(), leaf)
    torch.testing.assert_close(to_torch(got), want)
    assert_still_works()


# ---- errors -----------------------------------------------------------------------------

def assert_still_works() -> None:
    torch.testing.assert_close(to_torch(fast_path.call(ms_aten.op("relu"), to_ms(X))), X.relu())


def test_kernel_error_reaches_python_and_the_next_call_runs():
    op = ms_aten.op("index_select", dim=0)
    message = r"ms_aten: aten::index_select.*index out of range"
    with pytest.raises(RuntimeError, match=message):
        # PYNATIVE launches asynchronously: the error surfaces at the next sync (asnumpy).
        fast_path.call(op, to_ms(X), to_ms(torch.tensor([5]))).asnumpy()
    assert_still_works()
    # The same op object keeps working with valid input.
    got = fast_path.call(op, to_ms(X), to_ms(torch.tensor([2])))
    torch.testing.assert_close(to_torch(got), X[torch.tensor([2])])


def test_kernel_error_under_grad_reaches_python():
    op = ms_aten.op("index_select", dim=0)
    index = to_ms(torch.tensor([5]))
    with pytest.raises(RuntimeError, match=r"index out of range"):
        ms.grad(lambda x: fast_path.call(op, x, index).sum())(to_ms(X)).asnumpy()
    assert_still_works()


def test_aten_shape_error_names_the_op():
    with pytest.raises(RuntimeError, match=r"aten::mm.*must have same reduction dim"):
        fast_path.call(ms_aten.op("mm"), to_ms(X), to_ms(X))
    assert_still_works()


def test_non_tensor_argument_is_a_type_error():
    with pytest.raises(TypeError, match=r"'aten::relu' takes MindSpore Tensors.*got str"):
        fast_path.call(ms_aten.op("relu"), "1.0")
    assert_still_works()


def test_wrong_tensor_count_is_a_type_error():
    with pytest.raises(TypeError, match=r"'aten::mm' takes 2 tensors \(self, mat2\), got 1"):
        fast_path.call(ms_aten.op("mm"), to_ms(X))
    assert_still_works()


# ---- fallback -----------------------------------------------------------------------------

def test_missing_module_is_silently_unavailable(unbuilt, recwarn):
    assert not pyboost.available()
    assert not recwarn.list
    with pytest.raises(RuntimeError, match=r"not built"):
        fast_path.call(ms_aten.op("relu"), to_ms(X))


def test_module_built_for_another_mindspore_is_not_used(monkeypatch):
    built_for = re.escape(ms.__version__)
    monkeypatch.setattr(ms, "__version__", "0.0.1")
    pyboost._module.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=rf"built for MindSpore {built_for}, not 0\.0\.1"):
            assert not pyboost.available()
    finally:
        pyboost._module.cache_clear()
