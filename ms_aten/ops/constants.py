"""Checking ms_aten.op constants against schema argument types, and encoding them.

Each constant becomes one token of the op spec that csrc/op/spec.cpp decodes (the token grammar
is documented there).
"""
from __future__ import annotations

import numbers
from typing import TypeGuard
from urllib.parse import quote

import torch

from ..native import dtypes

# torch's enum values, as c10::MemoryFormat and c10::Layout number them.
_MEMORY_FORMATS = {torch.contiguous_format: 0, torch.preserve_format: 1,
                   torch.channels_last: 2, torch.channels_last_3d: 3}
_LAYOUTS = {torch.strided: 0}


class ConstantError(TypeError):
    """A constant that does not fit its schema argument."""


def _base_type(arg) -> tuple[str, bool]:
    """('List[int]', optional?) from the argument's real type."""
    text = str(arg.real_type)
    if text.startswith("Optional[") and text.endswith("]"):
        return text[len("Optional["):-1], True
    return text, False


def is_tensor_arg(arg) -> bool:
    base, _ = _base_type(arg)
    return base in ("Tensor", "List[Tensor]", "List[Optional[Tensor]]")


def tensor_kind(arg) -> str:
    """'Tensor', 'Tensor?', 'Tensor[]' or 'Tensor?[]'."""
    base, optional = _base_type(arg)
    return {"Tensor": "Tensor?" if optional else "Tensor", "List[Tensor]": "Tensor[]",
            "List[Optional[Tensor]]": "Tensor?[]"}[base]


def _is_int(value: object) -> TypeGuard[numbers.Integral]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> TypeGuard[numbers.Real]:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _int_list(arg, value) -> list[int]:
    if _is_int(value) and arg.N:  # int[2] accepts a single int, as in torch
        return [int(value)] * arg.N
    if isinstance(value, (list, tuple)) and all(_is_int(v) for v in value):
        return [int(v) for v in value]
    raise ConstantError(f"expects a list of ints, got {value!r}")


def _scalar(value: numbers.Complex) -> bool | int | float | complex:
    """A Scalar as Python's own number type."""
    return value if isinstance(value, bool) else (
        int(value) if _is_int(value) else float(value) if _is_real(value) else complex(value))


def check_constant(arg, value):
    """The value normalized for its argument (dtypes and devices to torch's); ConstantError."""
    base, optional = _base_type(arg)
    where = f"argument '{arg.name}' ({arg.real_type})"
    try:
        if value is None:
            if optional or base == "Generator":
                return None
            raise ConstantError("expects a value, got None")
        if is_tensor_arg(arg):
            if base == "Tensor" and isinstance(value, (bool, int, float, complex)):
                return value  # a number where torch takes a tensor: wrapped as torch wraps it
            raise ConstantError("is a tensor: pass it at call time" +
                                (", or None here" if optional else "") +
                                ("" if base != "Tensor" else ", or a Python number"))
        if base in ("int", "SymInt") and _is_int(value):
            return int(value)
        if base == "float" and _is_real(value):
            return float(value)
        if base == "bool" and isinstance(value, bool):
            return value
        if base == "str" and isinstance(value, str):
            return value
        if base == "number" and isinstance(value, numbers.Complex):  # Scalar
            return _scalar(value)
        if base in ("List[int]", "List[SymInt]"):
            return _int_list(arg, value)
        if base == "List[float]" and isinstance(value, (list, tuple)) and all(map(_is_real, value)):
            return [float(v) for v in value]
        if base == "List[bool]" and isinstance(value, (list, tuple)) and all(
                isinstance(v, bool) for v in value):
            return list(value)
        if base == "List[Optional[number]]" and isinstance(value, (list, tuple)) and all(
                v is None or isinstance(v, numbers.Complex) for v in value):  # Scalar?[]
            return [None if v is None else _scalar(v) for v in value]
        if base == "ScalarType":
            return dtypes.to_torch(value)
        if base == "Device" and isinstance(value, (str, torch.device)):
            device = torch.device(value)
            if device.type != "cpu":
                raise ConstantError(f"only the cpu device is supported, got {value!r}")
            return device
        if base == "MemoryFormat" and value in _MEMORY_FORMATS:
            return value
        if base == "Layout" and value in _LAYOUTS:
            return value
        raise ConstantError(f"expects {base}, got {value!r}")
    except (ConstantError, TypeError, RuntimeError) as error:
        raise ConstantError(f"{where} {error}") from None


def encode(arg, value) -> str:
    """The spec token for a checked constant."""
    base, _ = _base_type(arg)
    if value is None:
        return "N"
    if base == "Tensor":  # a number in a Tensor slot: a wrapped-number tensor (csrc/op/spec.h)
        return "W" + encode_number(value)
    if isinstance(value, bool):
        return encode_number(value)
    if base in ("List[int]", "List[SymInt]"):
        return "I" + ",".join(map(str, value))
    if base == "List[float]":
        return "F" + ",".join(map(repr, value))
    if base == "List[bool]":
        return "B" + ",".join(str(int(v)) for v in value)
    if base == "List[Optional[number]]":
        return "S" + "/".join("N" if v is None else encode_number(v) for v in value)
    if base == "ScalarType":
        return "y" + dtypes.spec_name(value)
    if base == "Device":
        return "d" + quote(str(value), safe="")
    if base == "MemoryFormat":
        return f"i{_MEMORY_FORMATS[value]}"
    if base == "Layout":
        return f"i{_LAYOUTS[value]}"
    if isinstance(value, str):
        return "s" + quote(value, safe="")
    return encode_number(value)


def encode_number(value: bool | int | float | complex) -> str:
    if isinstance(value, bool):
        return f"b{int(value)}"
    if isinstance(value, float):
        return "f" + repr(value)
    if isinstance(value, complex):
        return f"c{value.real!r},{value.imag!r}"
    return f"i{value}"
