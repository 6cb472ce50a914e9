"""Gradients of bridged ops against torch autograd, in both modes."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mindspore import nn

import ms_aten
from ms_aten.native import pyboost

from common import as_tuple, cotangents, flat, randn, set_mode, to_ms, to_torch, torch_grads

X, W = randn(3, 4), randn(4)
IDX = torch.tensor([[0, 2], [1, 3], [2, 0]])

# (ms_aten name, constants, inputs, torch reference, indices of differentiable inputs)
CASES = [
    ("gelu", {}, (X,), F.gelu),
    ("mul.Tensor", {}, (X, W), torch.mul),
    ("sum.dim_IntList", {"dim": [1]}, (X,), lambda x: x.sum(1)),
    ("mean.dim", {"dim": [0], "keepdim": True}, (X,), lambda x: x.mean(0, keepdim=True)),
    ("mm", {}, (X, randn(4, 5)), torch.mm),
    ("conv2d", {"padding": 1}, (randn(1, 2, 5, 5), randn(3, 2, 3, 3), randn(3)),
     lambda x, w, b: F.conv2d(x, w, b, padding=1)),
    ("layer_norm", {"normalized_shape": [4]}, (X, W, randn(4)),
     lambda x, w, b: F.layer_norm(x, [4], w, b)),
    ("softmax.int", {"dim": 1}, (X,), lambda x: x.softmax(1)),
    ("gather", {"dim": 1}, (X, IDX), lambda x, i: x.gather(1, i)),
    ("cat", {"dim": 0}, ((X, randn(2, 4)),), lambda xs: torch.cat(xs, 0)),
    ("max.dim", {"dim": 1}, (X,), lambda x: tuple(x.max(1))),
    ("topk", {"k": 2}, (X,), lambda x: tuple(x.topk(2))),
]


class WeightedLoss(nn.Cell):
    """sum(op(*args)[k] * weights[k]). Takes flat tensors: MindSpore's grad gives nothing for
    a tuple-typed Cell input, so tensor lists are regrouped inside (layout: 0 = a tensor,
    n = a list of n tensors)."""

    def __init__(self, op, weights, layout):
        super().__init__()
        self.op = op
        self.weights = weights  # a tuple of Tensors (None for outputs that get no weight)
        self.layout = layout

    def construct(self, *flat_args):
        args = ()
        i = 0
        for n in self.layout:
            if n == 0:
                args = args + (flat_args[i],)
                i = i + 1
            else:
                args = args + (flat_args[i:i + n],)
                i = i + n
        outputs = self.op(*args)
        if not isinstance(outputs, tuple):
            outputs = (outputs,)
        loss = 0.0
        for output, weight in zip(outputs, self.weights):  # noqa: B905 (GRAPH mode has no strict=)
            if weight is not None:
                loss = loss + (output * weight).sum()
        return loss


def ms_grads(op, inputs, weights, mode: str) -> list:
    set_mode(mode)
    layout = tuple(len(x) if isinstance(x, tuple) else 0 for x in inputs)
    net = WeightedLoss(op, tuple(to_ms(w) if w is not None else None for w in weights), layout)
    args = to_ms(flat(inputs))
    grads = ms.grad(net, grad_position=tuple(range(len(args))))(*args)
    return list(grads) if len(args) > 1 else [grads]


@pytest.mark.parametrize("name, constants, inputs, reference", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_torch_autograd(mode, name, constants, inputs, reference):
    weights = cotangents(as_tuple(reference(*inputs)))
    expected = torch_grads(reference, inputs, weights)
    got = ms_grads(ms_aten.op(name, **constants), inputs, weights, mode)
    assert len(got) == len(expected)
    for actual, want in zip(got, expected, strict=True):
        torch.testing.assert_close(to_torch(actual), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, constants, shape", [
    ("tanh", {}, (3, 4)),
    ("prod.dim_int", {"dim": 1}, (2, 3)),
    ("cumsum", {"dim": 0}, (4, 2)),
    ("linalg_vector_norm", {"ord": 3.0}, (5,)),
])
def test_gradient_matches_finite_differences_in_float64(mode, name, constants, shape):
    op = ms_aten.op(name, **constants)
    x = randn(*shape, dtype=torch.float64)
    weight = randn(*op.infer([list(shape)], [ms.float64])[0][0], dtype=torch.float64)

    def loss(value: torch.Tensor) -> float:
        set_mode("pynative")
        return float((to_torch(op(to_ms(value))) * weight).sum())

    eps = 1e-6
    numeric = torch.zeros_like(x).reshape(-1)
    for i in range(x.numel()):
        step = torch.zeros_like(x).reshape(-1)
        step[i] = eps
        numeric[i] = (loss(x + step.reshape(shape)) - loss(x - step.reshape(shape))) / (2 * eps)
    (analytic,) = ms_grads(op, (x,), [weight], mode)
    torch.testing.assert_close(to_torch(analytic), numeric.reshape(shape), rtol=1e-6, atol=1e-7)


def test_integer_inputs_get_zero_gradients(mode):
    (grad_x, grad_idx) = ms_grads(ms_aten.op("gather", dim=1), (X, IDX), [randn(3, 2)], mode)
    assert to_torch(grad_idx).dtype == torch.int64
    assert not to_torch(grad_idx).any()


def test_integer_outputs_pass_no_gradient(mode):
    """argmax and searchsorted beside a differentiable path: their integer outputs carry no
    gradient (torch's and MindSpore's own argmax), the rest is torch's."""
    argmax, searchsorted = ms_aten.op("argmax", dim=1), ms_aten.op("searchsorted.Tensor")
    edges = torch.tensor([-1.0, 0.0, 1.0])

    def f(x, boundaries):
        counts = (argmax(x) + searchsorted(boundaries, x).sum(1)).astype(ms.float32)
        return (x * x).sum() + counts.sum()

    set_mode(mode)
    grad_x, grad_edges = ms.grad(f, grad_position=(0, 1))(to_ms(X), to_ms(edges))
    torch.testing.assert_close(to_torch(grad_x), 2 * X)
    assert not to_torch(grad_edges).any()


def test_a_floating_output_without_a_derivative_raises_when_a_gradient_is_requested(mode):
    # histc's float output is one autograd does not record.
    with pytest.raises(RuntimeError, match=r"aten::histc \(backward\).*not differentiable"):
        grads = ms_grads(ms_aten.op("histc", bins=4), (X,), [torch.ones(4)], mode)
        np.asarray(grads[0].asnumpy())


def test_inputs_torch_refuses_to_differentiate_get_zeros(mode):
    # soft_margin_loss is not differentiable in `target`; autograd says so by name.
    x, target = randn(3, 4), torch.sign(randn(3, 4))
    leaf = x.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(F.soft_margin_loss(leaf, target) * 2.0, [leaf])
    grad_x, grad_target = ms_grads(ms_aten.op("soft_margin_loss"), (x, target),
                                   [torch.tensor(2.0)], mode)
    torch.testing.assert_close(to_torch(grad_x), expected, rtol=1e-5, atol=1e-6)
    assert not to_torch(grad_target).any()


# ---- second order -------------------------------------------------------------------------

def randn64(*shape: int) -> torch.Tensor:
    return randn(*shape, dtype=torch.float64)


X64, W64 = randn64(3, 4), randn64(4)

# (ms_aten name, constants, float64 inputs, torch reference); every input is differentiated
SECOND_ORDER_CASES = [
    ("tanh", {}, (X64,), torch.tanh),
    ("gelu", {}, (X64,), F.gelu),
    ("mul.Tensor", {}, (X64, W64), torch.mul),
    ("mm", {}, (X64, randn64(4, 5)), torch.mm),
    ("softmax.int", {"dim": 1}, (X64,), lambda x: x.softmax(1)),
    ("layer_norm", {"normalized_shape": [4]}, (X64, W64, randn64(4)),
     lambda x, w, b: F.layer_norm(x, [4], w, b)),
]


def torch_hessian_vector(reference, inputs, weight, vectors) -> list[torch.Tensor]:
    """d/d(inputs) of <d loss/d(inputs), vectors>, loss = sum(reference(*inputs) * weight):
    torch.autograd.grad with create_graph, then again."""
    leaves = [x.clone().requires_grad_() for x in inputs]
    loss = (reference(*leaves) * weight).sum()
    first = torch.autograd.grad(loss, leaves, create_graph=True)
    inner = sum((g * v).sum() for g, v in zip(first, vectors, strict=True))
    second = torch.autograd.grad(inner, leaves, allow_unused=True)
    return [torch.zeros_like(x) if s is None else s for x, s in zip(inputs, second, strict=True)]


def ms_hessian_vector(op, inputs, weight, vectors, mode: str) -> list:
    """The same through ms.grad(ms.grad(...)): a Hessian-vector product."""
    set_mode(mode)
    net = WeightedLoss(op, (to_ms(weight),), (0,) * len(inputs))
    positions = tuple(range(len(inputs)))
    first = ms.grad(net, grad_position=positions)
    ms_vectors = to_ms(vectors)

    def inner(*args):
        grads = first(*args)
        grads = grads if isinstance(grads, tuple) else (grads,)
        total = 0.0
        for i in range(len(ms_vectors)):  # compiled in GRAPH mode: no zip(strict=)
            total = total + (grads[i] * ms_vectors[i]).sum()
        return total

    second = ms.grad(inner, grad_position=positions)(*to_ms(inputs))
    return list(second) if isinstance(second, tuple) else [second]


@pytest.mark.parametrize("name, constants, inputs, reference", SECOND_ORDER_CASES,
                         ids=[c[0] for c in SECOND_ORDER_CASES])
def test_second_order_gradient_matches_torch_autograd(mode, name, constants, inputs, reference):
    weight = randn64(*reference(*inputs).shape)
    vectors = [randn64(*x.shape) for x in inputs]
    expected = torch_hessian_vector(reference, inputs, weight, vectors)
    got = ms_hessian_vector(ms_aten.op(name, **constants), inputs, weight, vectors, mode)
    assert len(got) == len(expected)
    for actual, want in zip(got, expected, strict=True):
        torch.testing.assert_close(to_torch(actual), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name, constants", [("tanh", {}), ("gelu", {}),
                                             ("softmax.int", {"dim": 1})])
def test_hessian_vector_product_matches_finite_differences(mode, name, constants):
    # H v = (grad(x + eps v) - grad(x - eps v)) / 2 eps, from first-order ms_aten gradients.
    op = ms_aten.op(name, **constants)
    weight, vector = randn64(3, 4), randn64(3, 4)
    (analytic,) = ms_hessian_vector(op, (X64,), weight, [vector], mode)
    eps = 1e-6
    (plus,) = ms_grads(op, (X64 + eps * vector,), [weight], mode)
    (minus,) = ms_grads(op, (X64 - eps * vector,), [weight], mode)
    numeric = (to_torch(plus) - to_torch(minus)) / (2 * eps)
    torch.testing.assert_close(to_torch(analytic), numeric, rtol=1e-6, atol=1e-8)


def test_third_order_gradient_matches_torch_autograd(mode):
    # Each backward kernel's backward is built when first asked for: the chain goes on.
    set_mode(mode)
    tanh = ms_aten.op("tanh")

    def loss(x):
        return tanh(x).sum()

    third = ms.grad(ms.grad(ms.grad(loss)))(to_ms(X64))
    leaf = X64.clone().requires_grad_()
    (first,) = torch.autograd.grad(torch.tanh(leaf).sum(), leaf, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), leaf, create_graph=True)
    (want,) = torch.autograd.grad(second.sum(), leaf)
    torch.testing.assert_close(to_torch(third), want, rtol=1e-10, atol=1e-10)


class PenaltyNet(nn.Cell):
    """A small network of ms_aten ops: sum(layer_norm(gelu(x @ w), gamma, beta) * c)."""

    def __init__(self, c):
        super().__init__()
        self.mm, self.gelu = ms_aten.op("mm"), ms_aten.op("gelu")
        self.norm = ms_aten.op("layer_norm", normalized_shape=[5])
        self.c = c

    def construct(self, x, w, gamma, beta):
        return (self.norm(self.gelu(self.mm(x, w)), gamma, beta) * self.c).sum()


def test_gradient_penalty_matches_torch_autograd(mode):
    # ||d f/dx||^2 differentiated with respect to the weights, as WGAN-GP and R1 do.
    x, w, gamma, beta, c = randn64(3, 4), randn64(4, 5), randn64(5), randn64(5), randn64(3, 5)
    leaves = [t.clone().requires_grad_() for t in (x, w, gamma, beta)]
    out = (F.layer_norm(F.gelu(leaves[0] @ leaves[1]), [5], leaves[2], leaves[3]) * c).sum()
    (grad_x,) = torch.autograd.grad(out, leaves[0], create_graph=True)
    # beta does not reach d f/dx: its gradient is zero
    expected = [torch.zeros_like(t) if g is None else g for t, g in zip(
        (w, gamma, beta), torch.autograd.grad((grad_x ** 2).sum(), leaves[1:], allow_unused=True),
        strict=True)]

    set_mode(mode)
    grad_x_of = ms.grad(PenaltyNet(to_ms(c)), grad_position=0)

    def penalty(x, w, gamma, beta):
        return (grad_x_of(x, w, gamma, beta) ** 2).sum()

    got = ms.grad(penalty, grad_position=(1, 2, 3))(*to_ms((x, w, gamma, beta)))
    for actual, want in zip(got, expected, strict=True):
        torch.testing.assert_close(to_torch(actual), want, rtol=1e-9, atol=1e-10)


def test_op_torch_cannot_differentiate_twice_raises_by_name(mode):
    # torch has no derivative for _cdist_backward: the first order works, the second says why.
    op = ms_aten.op("cdist")
    a, b = randn64(3, 4), randn64(5, 4)
    leaf = a.clone().requires_grad_()
    (want,) = torch.autograd.grad(torch.cdist(leaf, b).sum(), leaf)

    def distance(u, v):
        return op(u, v).sum()

    set_mode(mode)
    first = ms.grad(distance)(*to_ms((a, b)))
    torch.testing.assert_close(to_torch(first), want)
    message = (r"aten::cdist \(second-order backward\): torch cannot differentiate aten::cdist "
               r"twice: the derivative for '_cdist_backward' is not implemented")
    with pytest.raises(RuntimeError, match=message):
        ms.grad(ms.grad(distance))(*to_ms((a, b))).asnumpy()
    # The process lives on, and later gradients are right.
    torch.testing.assert_close(to_torch(ms.grad(distance)(*to_ms((a, b)))), want)


class StructuredNet(nn.Cell):
    """Ops whose backwards regroup tensors: a Tensor[] input (cat), outputs of mixed dtypes
    (max.dim), a Tensor[] output (unbind)."""

    def __init__(self, c):
        super().__init__()
        self.cat, self.max = ms_aten.op("cat", dim=0), ms_aten.op("max.dim", dim=1)
        self.unbind, self.tanh = ms_aten.op("unbind", dim=0), ms_aten.op("tanh")
        self.c = c

    def construct(self, x, w):
        h = self.tanh(self.cat((x * w, x)))
        values, _ = self.max(h * self.c)
        rows = self.unbind(h)
        return values.sum() + (rows[0] * rows[1]).sum()


def test_gradient_penalty_through_lists_and_multiple_outputs(mode):
    x, w, c = randn64(3, 4), randn64(4), randn64(6, 4)

    def reference(x, w):
        h = torch.tanh(torch.cat((x * w, x)))
        rows = h.unbind(0)
        return (h * c).max(1).values.sum() + (rows[0] * rows[1]).sum()

    leaves = [t.clone().requires_grad_() for t in (x, w)]
    (grad_x,) = torch.autograd.grad(reference(*leaves), leaves[0], create_graph=True)
    (want,) = torch.autograd.grad((grad_x ** 2).sum(), leaves[1])

    set_mode(mode)
    grad_x_of = ms.grad(StructuredNet(to_ms(c)), grad_position=0)

    def penalty(x, w):
        return (grad_x_of(x, w) ** 2).sum()

    got = ms.grad(penalty, grad_position=1)(*to_ms((x, w)))
    torch.testing.assert_close(to_torch(got), want, rtol=1e-9, atol=1e-10)


def test_second_order_without_the_fast_path_module(monkeypatch):
    # PYNATIVE falls back to the Custom route when the fast-path module is missing: there the
    # VJP primitives' own bprops give second orders, except through a Tensor[] input.
    monkeypatch.setattr(pyboost, "available", lambda: False)
    set_mode("pynative")
    weight, vector = randn64(3, 4), randn64(3, 4)
    expected = torch_hessian_vector(torch.tanh, (X64,), weight, [vector])
    got = ms_hessian_vector(ms_aten.op("tanh"), (X64,), weight, [vector], "pynative")
    torch.testing.assert_close(to_torch(got[0]), expected[0], rtol=1e-10, atol=1e-10)

    cat = ms_aten.op("cat", dim=0)

    def through_cat(x):
        return (cat((x, x)) ** 3).sum()

    with pytest.raises(RuntimeError, match=r"aten::cat: gradients of order 2 of ops with a "
                                           r"Tensor\[\] input need GRAPH mode or the PYNATIVE"):
        ms.grad(ms.grad(through_cat))(to_ms(X64))
    (want,) = torch_grads(lambda x: torch.cat((x, x)) ** 3, (X64,), [torch.ones(6, 4)])
    torch.testing.assert_close(to_torch(ms.grad(through_cat)(to_ms(X64))), want)
