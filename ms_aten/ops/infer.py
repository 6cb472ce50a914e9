"""Output shapes and dtypes of a bridged op: libms_aten.so runs the op on torch meta tensors
(csrc/op/infer.h). MindSpore asks the library for shapes through the kernel's C++ hook
(primitive.py says how the two are kept in step), Python through ctypes here.
"""
from __future__ import annotations

import ctypes
import itertools
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np
from mindspore.common import dtype as mstype

from ..native import dtypes, library

Shape = list[int]
EMIT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                         ctypes.c_char_p)
ERROR_BYTES = 4096
_UNKNOWABLE = 2  # ms_aten_infer's return code when no meta kernel exists (bridge_abi.h)


@cache
def _infer_function():
    function = library.load().ms_aten_infer
    shapes = ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))
    function.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int,
                         ctypes.POINTER(ctypes.c_int), shapes, ctypes.POINTER(ctypes.c_char_p),
                         EMIT, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


class ShapeInferenceError(RuntimeError):
    """The op cannot be shape-inferred ahead of its launch (for example nonzero)."""


class ValueDependentError(ShapeInferenceError):
    """The op's output shape depends on its input values, and GRAPH mode has no upper bound to
    pad it to (bincount, linalg_lstsq; bounded.py pads nonzero, unique, masked_select): ms_aten
    runs it in PYNATIVE mode only (value_dependent.py)."""


def flatten_infer_args(args: Sequence[dict]) -> tuple[list[Shape], list[Any]]:
    """Shapes and dtypes of MindSpore's infer arguments, tuple inputs expanded as the kernel
    receives them (None arguments and None holes of a Tensor?[] dropped). A tuple input carries
    a tuple of dtypes; a tensor, one dtype; a Python number, its number type; None, None."""
    shapes: list[Shape] = []
    types: list[Any] = []
    for arg in args:
        if arg["dtype"] is None:  # a None argument: the kernel gets no tensor for it
            continue
        if isinstance(arg["dtype"], (tuple, list)):
            for shape, dtype in zip(arg["shape"], arg["dtype"], strict=True):
                if isinstance(dtype, mstype.TensorType):
                    shapes.append(shape)
                    types.append(dtype)
        else:
            shapes.append(arg["shape"])
            types.append(arg["dtype"])
    return shapes, types


def c_shapes(shapes: Sequence[Sequence[int]]) -> tuple[Any, Any]:
    """(ndims, shapes) as the library's C API takes them."""
    # All dims in one array and the pointers computed into it, in numpy: a GRAPH-mode call of
    # a dynamic program converts its weights' shapes too, and a ctypes array and cast per
    # shape cost 0.12 ms per call for a 4-layer GPT-2's 64 weights.
    n = len(shapes)
    ndims = np.fromiter(map(len, shapes), dtype=np.intc, count=n)
    dims = np.fromiter(itertools.chain.from_iterable(shapes), dtype=np.int64,
                       count=int(ndims.sum()))
    starts = np.zeros(n, dtype=np.uintp)
    np.cumsum(ndims[:-1], out=starts[1:])
    pointers = (ctypes.POINTER(ctypes.c_int64) * n).from_buffer(
        (dims.ctypes.data + starts * dims.itemsize).data)
    # The memory they point into lives as long as they do.
    pointers.dims = dims  # type: ignore[attr-defined]
    return (ctypes.c_int * n).from_buffer(ndims.data), pointers


def infer_outputs(spec: str, shapes: Sequence[Sequence[int]], ms_dtypes: Sequence[Any],
                  site: int = -1) -> tuple[list[Shape], list[Any]]:
    """(shapes, MindSpore TensorTypes) of the outputs of `spec` for these inputs, from the
    library (-1: an unknown size, [-2]: an unknown rank, in and out). `site`, an op object's
    ms_aten_uid, tells the library's shape hook which dtypes that object is called with.
    ShapeInferenceError when the op has no meta kernel, RuntimeError when ATen refuses."""
    n = len(shapes)
    ndims, pointers = c_shapes(shapes)
    names = (ctypes.c_char_p * n)(
        *[dtypes.spec_name(dtypes.to_torch(d)).encode() for d in ms_dtypes])
    out_shapes: list[Shape] = []
    out_types: list[Any] = []

    def emit(_context, ndim: int, dims, dtype: bytes) -> None:
        out_shapes.append([dims[i] for i in range(ndim)])
        out_types.append(mstype.TensorType(dtypes.to_ms(_BY_NAME[dtype])))

    error = ctypes.create_string_buffer(ERROR_BYTES)
    code = _infer_function()(spec.encode(), site, n, ndims, pointers, names, EMIT(emit), None,
                             error, ERROR_BYTES)
    if code:
        message = error.value.decode(errors="replace")
        raise (ShapeInferenceError if code == _UNKNOWABLE else RuntimeError)(message)
    return out_shapes, out_types


_BY_NAME = {dtypes.spec_name(t).encode(): t for t in dtypes.TORCH_TO_MS}
