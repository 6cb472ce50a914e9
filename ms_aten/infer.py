"""Output shapes and dtypes of a bridged op, from running it on torch meta tensors."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mindspore as ms
import torch
from mindspore import context
from mindspore.common import dtype as mstype

from . import dtypes
from .binding import Binding

Shape = list[int]


class ShapeInferenceError(RuntimeError):
    """The op cannot be shape-inferred ahead of its launch (for example nonzero)."""


def group_inputs(binding: Binding, flat: Sequence[Any]) -> list[Any]:
    """Flat call-time items -> one item per tensor slot (a list for the tensor-list slot)."""
    n_fixed = len(binding.slots) - (binding.list_position is not None)
    position = binding.list_position
    if position is None:
        if len(flat) != n_fixed:
            raise TypeError(f"ms_aten op '{binding.name}' takes {n_fixed} tensors "
                            f"({', '.join(s.name for s in binding.slots)}), got {len(flat)}")
        return list(flat)
    if len(flat) < n_fixed:
        raise TypeError(f"ms_aten op '{binding.name}' takes {n_fixed} tensors and a tensor list "
                        f"({', '.join(s.name for s in binding.slots)}), got {len(flat)} tensors")
    n_after = n_fixed - position
    end = len(flat) - n_after
    return [*flat[:position], list(flat[position:end]), *flat[end:]]


def flatten_infer_args(args: Sequence[dict]) -> tuple[list[Shape], list[Any]]:
    """Shapes and dtypes of MindSpore's infer arguments, tuple inputs expanded as the kernel
    receives them. A tuple input carries a tuple of dtypes; a tensor, one dtype."""
    shapes: list[Shape] = []
    types: list[Any] = []
    for arg in args:
        if isinstance(arg["dtype"], (tuple, list)):
            shapes.extend(arg["shape"])
            types.extend(arg["dtype"])
        else:
            shapes.append(arg["shape"])
            types.append(arg["dtype"])
    return shapes, types


def _flatten_results(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for item in result for t in _flatten_results(item)]


class MetaInfer:
    """Output (shapes, dtypes) for input (shapes, dtypes), cached: PyNative infers every call."""

    def __init__(self, binding: Binding):
        self.binding = binding
        namespace, op_name = binding.schema.name.split("::")
        packet = getattr(getattr(torch.ops, namespace), op_name)
        self.overload = getattr(packet, binding.schema.overload_name or "default")
        self.cache: dict[tuple, tuple[list[Shape], list[Any]]] = {}

    def __call__(self, shapes: Sequence[Shape], ms_dtypes: Sequence[Any]):
        key = (tuple(map(tuple, shapes)), tuple(ms_dtypes))  # MindSpore dtypes hash by value
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self._infer(shapes, ms_dtypes)
        return hit

    def _infer(self, shapes, ms_dtypes):
        name = self.binding.name
        for shape in shapes:
            if any(d < 0 for d in shape):
                raise ShapeInferenceError(
                    f"ms_aten op '{name}': dynamic input shape {list(shape)}; ms_aten needs "
                    f"static shapes in GRAPH mode (run the Cell without set_inputs(None dims))")
        metas = [torch.empty(s, dtype=dtypes.to_torch(d), device="meta")
                 for s, d in zip(shapes, ms_dtypes, strict=True)]
        names = (s.name for s in self.binding.slots)
        kwargs = dict(zip(names, group_inputs(self.binding, metas), strict=True))
        kwargs.update(self.binding.constants)
        try:
            results = _flatten_results(self.overload(**kwargs))
        except NotImplementedError as error:
            raise ShapeInferenceError(
                f"ms_aten op '{name}' cannot run on meta tensors, so its output shape is not "
                f"known before it runs. Ops whose output shape depends on input values "
                f"(nonzero, unique, masked_select) are not supported. ({error})") from error
        except RuntimeError as error:  # ATen's own argument checks: shapes, dtypes, ranges
            raise RuntimeError(f"ms_aten op '{name}': {error}") from error
        return ([list(r.shape) for r in results],
                [mstype.TensorType(dtypes.to_ms(r.dtype)) for r in results])


def graph_mode() -> bool:
    # context._get_mode reads the same setting as ms.get_context("mode") in ~1 µs instead of
    # ~30 µs; it runs on every PYNATIVE call.
    return context._get_mode() == ms.GRAPH_MODE
