"""The 15 dtypes MindSpore 2.10 hands to AOT kernels, and their torch twins."""
from __future__ import annotations

import mindspore as ms
import torch
from mindspore.common import dtype as mstype

_PAIRS = (
    (ms.float16, torch.float16),
    (ms.bfloat16, torch.bfloat16),
    (ms.float32, torch.float32),
    (ms.float64, torch.float64),
    (ms.bool_, torch.bool),
    (ms.int8, torch.int8),
    (ms.int16, torch.int16),
    (ms.int32, torch.int32),
    (ms.int64, torch.int64),
    (ms.uint8, torch.uint8),
    (ms.uint16, torch.uint16),
    (ms.uint32, torch.uint32),
    (ms.uint64, torch.uint64),
    (ms.complex64, torch.complex64),
    (ms.complex128, torch.complex128),
)
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
