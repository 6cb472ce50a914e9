"""Output shapes and dtypes of a bridged op from a run on torch fake tensors: the PYNATIVE fast
path sizes its outputs with it, and MindSpore's Custom route uses it where the library's C++
meta inference (infer.py) cannot serve: calls with Python numbers, ops that return nothing, and
ops whose meta and device kernels disagree on a shape (op.py decides per call). With a
ShapeEnv, the same run gives the upper bounds to which GRAPH mode pads the outputs of ops whose
shapes depend on values (bounded.py).
"""
from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
from mindspore.common import dtype as mstype
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ..native import dtypes, library
from . import pattern as patterns
from .binding import Binding
from .constants import is_tensor_arg
from .infer import ShapeInferenceError, ValueDependentError

# Static stand-ins for value-dependent ops, for the GRAPH-mode message.
_STATIC_ALTERNATIVES = {
    "aten::nonzero": "aten::nonzero_static (size=<an upper bound>, fill_value=-1)",
    "aten::argwhere": "aten::nonzero_static (size=<an upper bound>, fill_value=-1)",
    "aten::masked_select": "aten::where.self with a fill value (keeps the input's shape)",
    "aten::index": "integer indices, e.g. from aten::nonzero_static, instead of a bool mask",
}


# Bounds that torch's fake kernels get wrong, by op: masked_select's counts self's elements
# only, where a mask can broadcast self to more, and is none for 2 elements or fewer.
_BOUND_CORRECTIONS: dict[str, Callable[[Sequence[Sequence[int]]], int]] = {
    "aten::masked_select": lambda shapes: math.prod(torch.broadcast_shapes(*shapes)),
}


def value_dependent_message(name: str, qualified: str) -> str:
    hint = _STATIC_ALTERNATIVES.get(qualified)
    return (f"ms_aten op '{name}': its output shape depends on input values, and GRAPH mode "
            f"sizes outputs before the graph runs: ms_aten pads them to an upper bound (then "
            f"cuts the result out), but torch gives none for this call (one exists for nonzero, "
            f"unique, masked_select and x[mask] with static input sizes). Run it in PYNATIVE "
            f"mode (on CPU, with the fast-path module built, ms_aten runs it there once its "
            f"inputs are computed)" +
            (f", or use {hint}" if hint else "; ATen has no static form of it"))


def _flatten_results(result) -> list[torch.Tensor]:
    if result is None:
        return []
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for item in result for t in _flatten_results(item)]


def wrapped_number(dtype, value: bool | int | float | complex = 0) -> torch.Tensor:
    """A Python number of the kind `dtype` holds, as torch's c10::scalar_to_tensor makes it
    into a tensor (0-dim, CPU; double, int64, bool or complex double) and marks it a wrapped
    number, so that it promotes as a Python scalar (a float16 tensor plus 1.0 stays float16).
    For inference its value does not matter: torch promotes wrapped numbers by kind only."""
    kind = dtypes.to_torch(dtype)
    wide = (torch.bool if kind == torch.bool else torch.complex128 if kind.is_complex
            else torch.float64 if kind.is_floating_point else torch.int64)
    tensor = torch.tensor(value, dtype=wide)
    if library.load().ms_aten_mark_wrapped_number(ctypes.c_void_p(tensor._cdata)) != 0:
        raise AssertionError("ms_aten_mark_wrapped_number refused a 0-dim tensor")
    return tensor


class FakeInfer:
    """Output (shapes, dtypes) for input (shapes, dtypes), cached: PyNative infers every call.

    The op runs under torch's FakeTensorMode on fake tensors of the op's device, not on bare
    meta tensors: fake tensors carry a device, so torch's own device-aware meta functions apply
    (the CPU kernel of native_batch_norm in eval mode returns empty saved statistics, and so
    does its fake; a meta tensor would say [C]), `_to_copy(device="cpu")` needs no data, ops
    without a meta kernel run torch's fallback on zeros, and ops whose output shape depends on
    values raise DynamicOutputShapeException from their `dynamic_output_shape` tag.
    """

    def __init__(self, binding: Binding):
        self.binding = binding
        namespace, op_name = binding.schema.name.split("::")
        packet = getattr(getattr(torch.ops, namespace), op_name)
        self.overload = getattr(packet, binding.schema.overload_name or "default")
        self.device = "cpu"  # the torch device the fake tensors claim (AtenOp.set_device)
        self.cache: dict[tuple, Any] = {}
        # A constant given for a Tensor argument is a Python number: the op takes it wrapped.
        numbers = {a.name for a in binding.schema.arguments
                   if is_tensor_arg(a) and binding.constants.get(a.name) is not None}
        self.constants = {name: wrapped_number(patterns.number_dtype(value), value)
                          if name in numbers else value
                          for name, value in binding.constants.items()}
        self.has_numbers = bool(numbers)

    def __call__(self, shapes: Sequence[Sequence[int]], ms_dtypes: Sequence[Any],
                 pattern: patterns.Pattern | None = None):
        return self._cached((tuple(map(tuple, shapes)), tuple(ms_dtypes), pattern),
                            lambda: self._infer(shapes, ms_dtypes, pattern))

    def bounds(self, shapes: Sequence[Sequence[int]], ms_dtypes: Sequence[Any]
               ) -> tuple[list[list[int]], list[Any]]:
        """For a call (every slot a tensor) whose output shapes depend on its input values:
        (shapes, dtypes) of its outputs, every size that depends on values at the upper bound
        torch's fake kernel gives it (nonzero's row count: the input's numel), for bounded.py.
        ValueDependentError when torch gives no bound (bincount's size is its largest value) or
        no shape at all (linalg_lstsq)."""
        return self._cached(("bounds", tuple(map(tuple, shapes)), tuple(ms_dtypes)),
                            lambda: self._bounds(shapes, ms_dtypes))

    def _cached(self, key: tuple, compute: Callable[[], Any]) -> Any:
        # MindSpore dtypes hash by value; a failure is cached too and raised again.
        hit = self.cache.get(key)
        if hit is None:
            try:
                hit = compute()
            except (ShapeInferenceError, RuntimeError, TypeError) as error:
                hit = error
            self.cache[key] = hit
        if isinstance(hit, Exception):
            raise hit
        return hit

    def kwargs(self, items: Sequence[Any], pattern: patterns.Pattern | None,
               constants: dict[str, Any] | None = None) -> dict[str, Any]:
        """The op's arguments by name: `items` (one per flat call-time item) grouped into the
        tensor slots, and the constants (the binding's unless given)."""
        grouped = patterns.group(self.binding, pattern, items)
        kwargs = {slot.name: value
                  for slot, value in zip(self.binding.slots, grouped, strict=True)}
        kwargs.update(self.constants if constants is None else constants)
        return kwargs

    def _infer(self, shapes, ms_dtypes, pattern):
        results = self._run(shapes, ms_dtypes, pattern)
        return ([list(r.shape) for r in results],
                [mstype.TensorType(dtypes.to_ms(r.dtype)) for r in results])

    def _bounds(self, shapes, ms_dtypes) -> tuple[list[list[int]], list[Any]]:
        if self.has_numbers:  # such calls run on meta tensors, which have no ShapeEnv
            raise ValueDependentError(value_dependent_message(self.binding.name,
                                                              self.binding.schema.name))
        env = ShapeEnv()
        correct = _BOUND_CORRECTIONS.get(self.binding.schema.name)
        # torch's fake unique_consecutive takes a negative dim as it is; ATen's kernels wrap it.
        constants = self.constants
        if isinstance(dim := constants.get("dim"), int) and dim < 0 and shapes:
            constants = {**constants, "dim": dim % max(len(shapes[0]), 1)}
        out_shapes, out_types = [], []
        for result in self._run(shapes, ms_dtypes, None, env, constants):
            dims = []
            for size in result.shape:
                if isinstance(size, torch.SymInt):
                    upper = (correct(shapes) if correct is not None
                             else env.bound_sympy(size.node.expr).upper)
                    # torch's int_oo is no sympy Integer; sys.maxsize - 1 is its "no bound" too
                    if not (isinstance(upper, int) or upper.is_Integer) or upper >= sys.maxsize - 1:
                        raise ValueDependentError(value_dependent_message(
                            self.binding.name, self.binding.schema.name))
                    size = upper
                dims.append(int(size))
            out_shapes.append(dims)
            out_types.append(mstype.TensorType(dtypes.to_ms(result.dtype)))
        return out_shapes, out_types

    def _run(self, shapes, ms_dtypes, pattern, shape_env: ShapeEnv | None = None,
             constants: dict[str, Any] | None = None) -> list[torch.Tensor]:
        """The op's results on fake tensors (sizes symbolic where they depend on values, given
        a ShapeEnv), with the binding's constants unless given."""
        name = self.binding.name
        for shape in shapes:
            if any(d < 0 for d in shape):
                raise ShapeInferenceError(
                    f"ms_aten op '{name}': dynamic input shape {list(shape)}; ms_aten needs "
                    f"static shapes in GRAPH mode (run the Cell without set_inputs(None dims))")
        numbers = number_positions(self.binding, pattern)
        try:
            if numbers or self.has_numbers:
                # FakeTensorMode hands an op its wrapped numbers as Python scalars, which torch's
                # binding refuses for most Tensor arguments (where.self): calls with numbers run
                # on meta tensors instead, the numbers as real CPU wrapped numbers, which ATen's
                # C++ meta functions (TensorIterator) take. Device constants become meta too.
                constants = {k: torch.device("meta") if isinstance(v, torch.device) else v
                             for k, v in self.constants.items()}
                items = _items(shapes, ms_dtypes, numbers, "meta")
                results = self.overload(**self.kwargs(items, pattern, constants))
            else:
                with FakeTensorMode(shape_env=shape_env):
                    items = _items(shapes, ms_dtypes, numbers, self.device)
                    results = self.overload(**self.kwargs(items, pattern, constants))
        except (DynamicOutputShapeException, DataDependentOutputException) as error:
            raise ValueDependentError(
                value_dependent_message(name, self.binding.schema.name)) from error
        except (UnsupportedOperatorException, NotImplementedError) as error:
            if torch.Tag.dynamic_output_shape in self.overload.tags:
                raise ValueDependentError(
                    value_dependent_message(name, self.binding.schema.name)) from error
            raise ShapeInferenceError(
                f"ms_aten op '{name}' has no shape function torch can run ahead of its data, so "
                f"its output shape is not known before it runs ({error})") from error
        except Exception as error:  # noqa: BLE001  (ATen's own checks: shapes, dtypes, ranges)
            raise RuntimeError(f"ms_aten op '{name}': {error}") from error
        return _flatten_results(results)


def _items(shapes, ms_dtypes, numbers: set[int], device: str) -> list[torch.Tensor]:
    """Empty tensors for the call-time tensors, wrapped numbers for the numbers."""
    return [wrapped_number(d) if i in numbers else
            torch.empty(s, dtype=dtypes.to_torch(d), device=device)
            for i, (s, d) in enumerate(zip(shapes, ms_dtypes, strict=True))]


def number_positions(binding: Binding, pattern: patterns.Pattern | None) -> set[int]:
    """Flat positions of the call-time Python numbers of a pattern."""
    if pattern is None:
        return set()
    positions, i = set(), 0
    for fill in pattern:
        if fill == patterns.NUMBER:
            positions.add(i)
        i += patterns.items_of(fill)
    return positions
