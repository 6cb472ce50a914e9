"""Which call-time tensor fills which schema slot, and the op spec the C++ side decodes."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from . import constants as consts
from .schema import Schema, full_name

SPEC_ATTR = "ms_aten_spec"  # the primitive attribute csrc/boundary/extra_abi0.cpp reads


@dataclass(frozen=True)
class TensorSlot:
    name: str
    kind: str  # 'Tensor', 'Tensor?', 'Tensor[]' or 'Tensor?[]'

    @property
    def is_list(self) -> bool:
        return self.kind.endswith("[]")


@dataclass(frozen=True)
class Binding:
    """A functional overload plus the constants of one ms_aten.op call."""

    schema: Schema
    constants: dict[str, Any]  # checked and normalized, by argument name
    slots: tuple[TensorSlot, ...]  # the call-time tensors, in schema order

    @classmethod
    def build(cls, schema: Schema, given: dict[str, Any]) -> Binding:
        checked = {}
        slots = []
        for arg in schema.arguments:
            if arg.name in given:
                checked[arg.name] = consts.check_constant(arg, given[arg.name])
            elif consts.is_tensor_arg(arg):
                slots.append(TensorSlot(arg.name, consts.tensor_kind(arg)))
        return cls(schema, checked, tuple(slots))

    @property
    def name(self) -> str:
        return full_name(self.schema)

    @cached_property
    def list_position(self) -> int | None:
        return next((i for i, s in enumerate(self.slots) if s.is_list), None)

    @cached_property  # read on every call's inference
    def returns_list(self) -> bool:
        return any(str(r.type) == "List[Tensor]" for r in self.schema.returns)

    @cached_property
    def returns_nothing(self) -> bool:
        """An op such as aten::_assert_async: MindSpore gives it one placeholder output."""
        return not self.schema.returns

    def spec(self, kind: str, target: Schema | None = None, pattern: tuple | None = None) -> str:
        """The op spec for kind 'call', 'out' (target: the out= overload) or 'vjp', for one
        call pattern (pattern.py; None: the base pattern, every slot a tensor)."""
        target = target or self.schema
        if pattern is None and self.returns_list and self.list_position is not None:
            raise TypeError(f"ms_aten.op('{self.name}'): both its inputs and its outputs are "
                            f"tensor lists; their lengths come from its first call")
        n_out = "*" if self.returns_list else str(len(self.schema.returns))
        fills = iter(pattern) if pattern is not None else None
        tokens = [kind, target.name, target.overload_name or ".", n_out]
        n_item = n_output = 0  # call-time items and out= buffers used so far
        for arg in target.arguments:
            if arg.is_out:
                tokens.append(f"o{n_output}")
                n_output += 1
            elif arg.name in self.constants:
                tokens.append(consts.encode(arg, self.constants[arg.name]))
            elif consts.is_tensor_arg(arg):
                token, n_item = _slot_token(consts.tensor_kind(arg), n_item,
                                            next(fills) if fills is not None else None)
                tokens.append(token)
            else:
                tokens.append("D")
        return " ".join(tokens)


def _slot_token(kind: str, first: int, fill) -> tuple[str, int]:
    """A tensor slot's spec token and the next call-time index: fill is the slot's entry in the
    call pattern (pattern.py), None for the base pattern."""
    is_list = kind.endswith("[]")
    letter = "Q" if kind == "Tensor?[]" else "T"
    if fill is None:  # base pattern: a tensor, or the one list of any length
        return (letter, first) if is_list else (f"t{first}", first + 1)
    if fill == "t":
        return f"t{first}", first + 1
    if fill == "n":
        return f"w{first}", first + 1  # a Python number, wrapped as torch wraps it
    if fill == "-":
        return "N", first
    entries = ["t"] * fill if isinstance(fill, int) else list(fill)  # "-": a None hole
    if not entries:
        raise TypeError("an empty tensor list cannot be described to the kernel; "
                        "pass at least one tensor")
    indices, n = [], first
    for entry in entries:
        indices.append("_" if entry == "-" else str(n))
        n += entry != "-"
    return f"{letter}[{','.join(indices)}]", n
