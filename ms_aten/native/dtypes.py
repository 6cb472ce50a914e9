"""The dtypes MindSpore 2.10 hands to AOT kernels, and their torch twins.

The table is the bridge library's (csrc/boundary/dtype_table.h, the one source the C++ side compiles
in), read once at import; every entry is checked against torch and MindSpore here, so a library
built from another table is an ImportError rather than a silently reinterpreted buffer.
"""
from __future__ import annotations

import ctypes
from typing import Any, NoReturn

import mindspore as ms
import torch
from mindspore.common import dtype as mstype

from . import library


def _library_table() -> list[tuple[str, str]]:
    """(MindSpore name, ATen ScalarType name) for each entry of the library's table."""
    lib = library.load()
    for symbol in ("ms_aten_dtype_name", "ms_aten_dtype_aten_name"):
        getattr(lib, symbol).restype = ctypes.c_char_p
        getattr(lib, symbol).argtypes = [ctypes.c_int]
    entries: list[tuple[str, str]] = []
    while (name := lib.ms_aten_dtype_name(len(entries))) is not None:
        entries.append((name.decode(), lib.ms_aten_dtype_aten_name(len(entries)).decode()))
    return entries


def _disagree(name: str, problem: str) -> NoReturn:
    raise ImportError(f"ms_aten's dtype table (in {library.LIBRARY}) disagrees with the installed "
                      f"packages on '{name}': {problem}; {library.REBUILD_HINT}")


def _pair(name: str, aten_name: str) -> tuple[Any, torch.dtype]:
    """The (MindSpore, torch) dtypes for one entry; ImportError where either disagrees."""
    ms_dtype, torch_dtype = getattr(mstype, name, None), getattr(torch, name, None)
    if not isinstance(ms_dtype, mstype.Type):
        _disagree(name, f"MindSpore {ms.__version__} has no dtype mindspore.{name}")
    if not isinstance(torch_dtype, torch.dtype):
        _disagree(name, f"torch {torch.__version__} has no dtype torch.{name}")
    if torch.empty(0, dtype=torch_dtype).type() != f"torch.{aten_name}Tensor":
        _disagree(name, f"the library maps it to ATen's {aten_name}, which torch.{name} is not")
    if mstype.type_size_in_bytes(ms_dtype) != torch_dtype.itemsize:
        _disagree(name, f"{ms_dtype} takes {mstype.type_size_in_bytes(ms_dtype)} bytes, "
                        f"torch.{name} {torch_dtype.itemsize}")
    return ms_dtype, torch_dtype


_PAIRS = tuple(_pair(name, aten_name) for name, aten_name in _library_table())
MS_TO_TORCH = dict(_PAIRS)
TORCH_TO_MS = {t: m for m, t in _PAIRS}


def element_type(dtype):
    """The element dtype of a MindSpore TensorType (as infer functions receive), else dtype."""
    return dtype.element_type() if isinstance(dtype, mstype.TensorType) else dtype


def to_torch(dtype) -> torch.dtype:
    """torch dtype for a MindSpore or torch dtype; TypeError for anything else."""
    if isinstance(dtype, torch.dtype):
        if dtype not in TORCH_TO_MS:
            raise TypeError(f"dtype {dtype} has no MindSpore equivalent")
        return dtype
    dtype = element_type(dtype)
    if dtype not in MS_TO_TORCH:
        raise TypeError(f"unsupported dtype {dtype}; supported: {sorted(map(str, MS_TO_TORCH))}")
    return MS_TO_TORCH[dtype]


def to_ms(dtype: torch.dtype):
    """MindSpore dtype for a torch dtype; TypeError for one MindSpore lacks (float8, qint8...)."""
    if dtype not in TORCH_TO_MS:
        raise TypeError(f"torch dtype {dtype} has no MindSpore equivalent")
    return TORCH_TO_MS[dtype]


def spec_name(dtype: torch.dtype) -> str:
    """The dtype's name as the C++ side spells it (MindSpore's names, which torch shares)."""
    return str(to_torch(dtype)).removeprefix("torch.")
