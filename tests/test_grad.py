"""Gradients of bridged ops against torch autograd, in both modes."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mindspore import nn

import ms_aten

from common import set_mode, to_ms, to_torch

g = torch.Generator().manual_seed(1)


def randn(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=dtype)


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


def flat(values) -> list:
    return [v for item in values for v in (flat(item) if isinstance(item, tuple) else [item])]


def cotangents(outputs) -> list[torch.Tensor]:
    """A fixed random weight per floating output, so every output element matters."""
    return [randn(*o.shape) if o.dtype.is_floating_point else None for o in outputs]


def torch_grads(reference, inputs, weights) -> list[torch.Tensor]:
    leaves = [x.clone().requires_grad_(x.dtype.is_floating_point) for x in flat(inputs)]
    it = iter(leaves)
    rebuilt = [tuple(next(it) for _ in x) if isinstance(x, tuple) else next(it) for x in inputs]
    outputs = reference(*rebuilt)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    loss = sum((o * w).sum() for o, w in zip(outputs, weights, strict=True) if w is not None)
    wrt = [x for x in leaves if x.requires_grad]
    grads = iter(torch.autograd.grad(loss, wrt))
    return [next(grads) if x.requires_grad else torch.zeros_like(x) for x in leaves]


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
    expected_outputs = reference(*inputs)
    if not isinstance(expected_outputs, tuple):
        expected_outputs = (expected_outputs,)
    weights = cotangents(expected_outputs)
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


def test_non_differentiable_op_raises_when_a_gradient_is_requested(mode):
    with pytest.raises(RuntimeError, match=r"aten::argmax \(backward\).*not differentiable"):
        grads = ms_grads(ms_aten.op("argmax", dim=1), (X,), [torch.ones(3)], mode)
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
