"""Shared test helpers: run a MindSpore op in either mode, convert to and from torch."""
from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import mindspore as ms
import numpy as np
import torch
from mindspore import Tensor, nn

from ms_aten import _lib, dtypes

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


class BridgeKernel:
    """One libms_aten.so kernel driven through its C API (ctypes) as MindSpore drives it: made
    from an op spec, launched on numpy buffers (inputs, then outputs), destroyed on exit."""

    _api = None  # the library, its C functions typed on first use

    def __init__(self, spec: str):
        if BridgeKernel._api is None:
            lib = _lib.library()
            lib.ms_aten_kernel_create.restype = ctypes.c_void_p
            lib.ms_aten_kernel_create.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
            lib.ms_aten_kernel_destroy.argtypes = [ctypes.c_void_p]
            lib.ms_aten_kernel_uses_out.argtypes = [ctypes.c_void_p]
            lib.ms_aten_kernel_launch.argtypes = [
                ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)),
                ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p, ctypes.c_size_t]
            BridgeKernel._api = lib
        self.handle = self._api.ms_aten_kernel_create(spec.encode(), None)

    def __enter__(self) -> BridgeKernel:
        return self

    def __exit__(self, *exc) -> None:
        self._api.ms_aten_kernel_destroy(self.handle)

    def launch(self, arrays: list[np.ndarray], dtype_names: list[str] | None = None) -> str:
        """Runs the kernel on `arrays`; '' or the error message."""
        n = len(arrays)
        params = (ctypes.c_void_p * n)(*(a.ctypes.data for a in arrays))
        ndims = (ctypes.c_int * n)(*(a.ndim for a in arrays))
        # 0-dim tensors arrive with a NULL shape, as MindSpore sends them.
        shapes = (ctypes.POINTER(ctypes.c_int64) * n)(*(
            (ctypes.c_int64 * a.ndim)(*a.shape) if a.ndim else None for a in arrays))
        names = dtype_names or [str(a.dtype) for a in arrays]
        types = (ctypes.c_char_p * n)(*(d.encode() for d in names))
        error = ctypes.create_string_buffer(1024)
        status = self._api.ms_aten_kernel_launch(self.handle, n, params, ndims, shapes, types,
                                                 error, 1024)
        assert status == (1 if error.value else 0)
        return error.value.decode()

    def uses_out(self) -> bool:
        """Whether launches write through the op's out= overload (csrc/kernel.h)."""
        return self._api.ms_aten_kernel_uses_out(self.handle) == 1
