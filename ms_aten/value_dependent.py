"""Ops whose output shape depends on their input values, in PYNATIVE mode.

nonzero, unique, masked_select, index with a bool mask: no shape function can size their
outputs before the data exists, and MindSpore's kernels cannot size an output after they run.
In PYNATIVE mode there is a way round: wait for the inputs, run the op in ATen on views of
MindSpore's host buffers (the same ATen kernel the bridge calls, reached through torch's
dispatcher with the op's constants), and hand the results to MindSpore as new tensors, sharing
ATen's memory where numpy can describe the dtype. When autograd records the call, the fast-path
module attaches the op's VJP kernel as its backward (csrc/pyboost/fast_path.cpp, `adopt`), so
masked_select and index with a mask have gradients. GRAPH mode refuses these ops at compile time
(infer.py, ValueDependentError).

The wait is a synchronization: everything queued before the call finishes first, as with any
read of a tensor's values.
"""
from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import mindspore as ms
import numpy as np
import torch
from mindspore import Tensor

from . import dtypes
from . import pattern as patterns
from .fake_infer import number_positions, wrapped_number

if TYPE_CHECKING:
    from .op import AtenOp


def to_torch(x: Tensor) -> torch.Tensor:
    """A torch view of a MindSpore CPU tensor's data, once the data is there (asnumpy waits)."""
    array = x.asnumpy()
    if x.dtype == ms.bfloat16:  # numpy's bfloat16 is not torch's: reinterpret the bits
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    # numpy may hand uint64 as ulonglong, which torch refuses; astype(copy=False) keeps that
    # type (numpy calls the two equal), a view with the canonical dtype does not.
    return torch.from_numpy(array.view(array.dtype.str))


def to_ms(t: torch.Tensor) -> Tensor:
    """A MindSpore tensor holding `t`'s values: its memory when numpy can describe the dtype."""
    dtypes.to_ms(t.dtype)  # a TypeError naming the dtype if MindSpore has none
    if t.dtype == torch.bfloat16:
        return Tensor(t.float().numpy(), dtype=ms.bfloat16)
    return Tensor.from_numpy(t.contiguous().numpy())  # (numpy's ascontiguousarray makes 0-dim 1-d)


def _results(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in value for t in _results(item)]


def run(module: ModuleType, op: AtenOp, vjp: Any, flat: Sequence[Tensor],
        pattern: patterns.Pattern | None) -> Tensor | tuple[Tensor, ...]:
    """op on `flat` (call-time tensors, a number as its 0-dim tensor) through ATen, now."""
    numbers = number_positions(op.binding, pattern)
    items = []
    for i, x in enumerate(flat):
        view = to_torch(x)
        if i in numbers:  # the number again as torch wraps it
            view = wrapped_number(x.dtype, view.item())
        items.append(view)
    try:
        with torch.no_grad():
            results = _results(op.infer.overload(**op.infer.kwargs(items, pattern)))
    except Exception as error:  # noqa: BLE001  (ATen's checks, as the kernel would report them)
        raise RuntimeError(f"ms_aten: {op.binding.name}: {error}") from error
    outputs = [to_ms(r) for r in results]
    single = len(outputs) == 1 and not op.binding.returns_list
    return module.adopt(vjp, list(flat), outputs, single)
