"""Helpers for testing ops through ms_aten against torch: run an op in either MindSpore mode,
convert tensors both ways, compare with torch eager, and get torch autograd's gradients.

    from ms_aten.testing import assert_same, run, to_ms
    for mode in MODES:
        assert_same(run(ms_aten.op("gelu"), (to_ms(x),), mode), torch.nn.functional.gelu(x))

ms_aten's own test suite imports these (tests/common.py); ms_aten.testing.opinfo runs PyTorch's
OpInfo samples through ms_aten.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mindspore as ms
import torch
from mindspore import Tensor, nn

from ..native import convert

MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}
# One seeded generator for every randn: reproducible inputs for a given set of tests.
GENERATOR = torch.Generator().manual_seed(0)


class OpCell(nn.Cell):
    """construct(*args) = op(*args), so GRAPH mode compiles the op inside a graph."""

    def __init__(self, op: Callable):
        super().__init__()
        self.op = op

    def construct(self, *args):
        return self.op(*args)


def set_mode(mode: str) -> None:
    """MindSpore's execution mode by name: "graph" or "pynative"."""
    ms.set_context(mode=MODES[mode])


def run(op: Callable, args: Sequence[Any], mode: str) -> Any:
    """op(*args) in PYNATIVE, or inside a compiled Cell in GRAPH mode."""
    set_mode(mode)
    return OpCell(op)(*args) if mode == "graph" else op(*args)


def to_ms(value: Any) -> Any:
    """torch tensors (also inside tuples and lists) to MindSpore copies; the rest unchanged."""
    if isinstance(value, torch.Tensor):
        return convert.to_ms(value)
    if isinstance(value, (tuple, list)):
        return tuple(to_ms(v) for v in value)
    return value


def to_torch(value: Any) -> Any:
    """MindSpore tensors (also inside tuples and lists) to torch copies; the rest unchanged."""
    if isinstance(value, Tensor):
        return convert.to_torch(value)
    if isinstance(value, (tuple, list)):
        return tuple(to_torch(v) for v in value)
    return value


def assert_same(actual: Any, expected: Any, **tolerances: Any) -> None:
    """actual (MindSpore) equals expected (torch): structure, shapes, dtypes and values;
    tolerances go to torch.testing.assert_close."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, tuple), f"expected a tuple of {len(expected)}, got {actual!r}"
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e, **tolerances)
        return
    got = to_torch(actual)
    assert got.shape == expected.shape, f"shape {tuple(got.shape)} != {tuple(expected.shape)}"
    assert got.dtype == expected.dtype, f"dtype {got.dtype} != {expected.dtype}"
    torch.testing.assert_close(got, expected, **tolerances)


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal values from GENERATOR."""
    return torch.randn(shape, generator=GENERATOR, dtype=dtype)


def as_tuple(value: Any) -> tuple:
    """An op's result as a tuple of outputs."""
    return value if isinstance(value, tuple) else (value,)


def flat(values: Sequence[Any]) -> list:
    """Call-time inputs with their tuples (Tensor[] arguments) expanded in place."""
    return [v for item in values for v in (flat(item) if isinstance(item, tuple) else [item])]


def regroup(flat_args: Sequence[Any], like: Sequence[Any]) -> list:
    """Flat tensors back into the layout of `like` (a tuple where it has a tuple)."""
    it = iter(flat_args)
    return [tuple(next(it) for _ in x) if isinstance(x, tuple) else next(it) for x in like]


def cotangents(outputs: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    """A random weight per floating output (None for the others), so every element matters."""
    return [randn(*o.shape) if o.dtype.is_floating_point else None for o in outputs]


def torch_grads(reference: Callable, inputs: Sequence[Any],
                weights: Sequence[torch.Tensor | None]) -> list[torch.Tensor]:
    """torch autograd's gradient of sum(reference(*inputs)[k] * weights[k]) for each flat input;
    zeros for the inputs autograd cannot differentiate (integers)."""
    leaves = [x.clone().requires_grad_(x.dtype.is_floating_point) for x in flat(inputs)]
    outputs = as_tuple(reference(*regroup(leaves, inputs)))
    loss = sum((o * w).sum() for o, w in zip(outputs, weights, strict=True) if w is not None)
    grads = iter(torch.autograd.grad(loss, [x for x in leaves if x.requires_grad]))
    return [next(grads) if x.requires_grad else torch.zeros_like(x) for x in leaves]
