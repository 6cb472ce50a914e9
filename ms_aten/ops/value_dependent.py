"""Ops whose output shape depends on their input values, in PYNATIVE mode.

nonzero, unique, masked_select, index with a bool mask: no shape function can size their
outputs before the data exists, and MindSpore's kernels cannot size an output after they run.
In PYNATIVE mode there is a way round: wait for the inputs, run the op in ATen on views of
MindSpore's host buffers (the same ATen kernel the bridge calls, reached through torch's
dispatcher with the op's constants), and hand the results to MindSpore as new tensors, sharing
ATen's memory where numpy can describe the dtype. When autograd records the call, the fast-path
module attaches the op's VJP kernel as its backward (csrc/pyboost/fast_path.cpp, `adopt`), so
masked_select and index with a mask have gradients. GRAPH mode pads their outputs instead
(bounded.py).

The wait is a synchronization: everything queued before the call finishes first, as with any
read of a tensor's values.
"""
from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import torch
from mindspore import Tensor

from ..native.convert import to_ms, to_torch
from . import pattern as patterns
from .fake_infer import FakeInfer, number_positions, wrapped_number


def _results(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in value for t in _results(item)]


def run(module: ModuleType, infer: FakeInfer, vjp: Any, flat: Sequence[Tensor],
        pattern: patterns.Pattern | None) -> Tensor | tuple[Tensor, ...]:
    """The op `infer` sizes, on `flat` (call-time tensors, a number as its 0-dim tensor),
    through ATen, now."""
    binding = infer.binding
    numbers = number_positions(binding, pattern)
    items = []
    for i, x in enumerate(flat):
        view = to_torch(x, copy=False)
        if i in numbers:  # the number again as torch wraps it
            view = wrapped_number(x.dtype, view.item())
        items.append(view)
    try:
        with torch.no_grad():
            results = _results(infer.overload(**infer.kwargs(items, pattern)))
    except Exception as error:  # noqa: BLE001  (ATen's checks, as the kernel would report them)
        raise RuntimeError(f"ms_aten: {binding.name}: {error}") from error
    outputs = [to_ms(r, copy=False) for r in results]
    single = len(outputs) == 1 and not binding.returns_list
    return module.adopt(vjp, list(flat), outputs, single)
