"""Tensors between torch and MindSpore on the CPU, of the same dtype: copies by default, shared
memory with `copy=False`.

    x = ms_aten.to_ms(torch.randn(2, 3))      # a MindSpore tensor
    t = ms_aten.to_torch(x)                   # and back
"""
from __future__ import annotations

import mindspore as ms
import numpy as np
import torch
from mindspore import Tensor

from . import dtypes


def to_torch(x: Tensor, *, copy: bool = True) -> torch.Tensor:
    """A torch tensor holding x's values; with copy=False a view of its host memory. Reading
    the values waits for whatever MindSpore still has queued to write them."""
    array = x.asnumpy()
    if x.dtype == ms.bfloat16:  # numpy's bfloat16 is not torch's: reinterpret the bits
        view = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    else:  # numpy may call uint64 ulonglong, which torch refuses: view as the canonical type
        view = torch.from_numpy(array.view(array.dtype.str))
    return view.clone() if copy else view


def to_ms(t: torch.Tensor, *, copy: bool = True) -> Tensor:
    """A MindSpore tensor holding t's values (detached, on the CPU); with copy=False it shares
    t's memory where numpy can describe the dtype (not bfloat16, which is always copied)."""
    dtype = dtypes.to_ms(t.dtype)  # a TypeError naming the dtype if MindSpore has none
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16
        return Tensor(t.float().numpy(), dtype=dtype)
    array = t.contiguous().numpy()
    return Tensor(array, dtype=dtype) if copy else Tensor.from_numpy(array)  # Tensor() copies
