"""Shared test helpers: run a MindSpore op in either mode, convert to and from torch."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mindspore as ms
import torch
from mindspore import Tensor, nn

from ms_aten import dtypes

MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}
ms.set_device("CPU")


class OpCell(nn.Cell):
    """construct(*args) = op(*args), so GRAPH mode compiles the op inside a graph."""

    def __init__(self, op: Callable):
        super().__init__()
        self.op = op

    def construct(self, *args):
        return self.op(*args)


def set_mode(mode: str) -> None:
    ms.set_context(mode=MODES[mode])


def run(op: Callable, args: Sequence[Any], mode: str):
    """op(*args) in PYNATIVE, or inside a compiled Cell in GRAPH mode."""
    set_mode(mode)
    return OpCell(op)(*args) if mode == "graph" else op(*args)


def to_ms(value):
    """torch tensors (also inside tuples and lists) to MindSpore tensors; the rest unchanged."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16:  # numpy has no bfloat16
            return Tensor(value.float().numpy(), dtype=ms.bfloat16)
        return Tensor(value.numpy(), dtype=dtypes.to_ms(value.dtype))
    if isinstance(value, (tuple, list)):
        return tuple(to_ms(v) for v in value)
    return value


def to_torch(value):
    """MindSpore tensors (also inside tuples) to torch tensors of the same dtype."""
    if isinstance(value, Tensor):
        torch_dtype = dtypes.to_torch(value.dtype)
        if torch_dtype == torch.bfloat16:
            return torch.from_numpy(value.astype(ms.float32).asnumpy()).to(torch.bfloat16)
        array = value.asnumpy()
        # numpy may report uint64 as ulonglong, which torch refuses: use the canonical type.
        return torch.from_numpy(array.astype(array.dtype.str)).to(torch_dtype)
    if isinstance(value, (tuple, list)):
        return tuple(to_torch(v) for v in value)
    return value


def assert_same(actual, expected, **tolerances) -> None:
    """actual (MindSpore) equals expected (torch): structure, shapes, dtypes and values."""
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
