"""Which call-time tensor fills which schema slot, and the op spec the C++ side decodes."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from . import constants as consts
from .schema import Schema, full_name

SPEC_ATTR = "ms_aten_spec"  # the primitive attribute csrc/extra_abi0.cpp reads


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
        if sum(s.is_list for s in slots) > 1:
            raise TypeError(f"ms_aten.op('{full_name(schema)}'): ops with more than one tensor "
                            f"list ({', '.join(s.name for s in slots if s.is_list)}) are not "
                            f"supported\n  schema: {schema}")
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

    def spec(self, kind: str, target: Schema | None = None) -> str:
        """The op spec for kind 'call', 'out' (target: the out= overload) or 'vjp'."""
        target = target or self.schema
        if self.returns_list and self.list_position is not None:
            raise TypeError(f"ms_aten.op('{self.name}'): both its inputs and its outputs are "
                            f"tensor lists, so MindSpore's buffers cannot be told apart")
        n_out = "*" if self.returns_list else str(len(self.schema.returns))
        tokens = [kind, target.name, target.overload_name or ".", n_out]
        n_tensor = n_output = 0
        for arg in target.arguments:
            if arg.is_out:
                tokens.append(f"o{n_output}")
                n_output += 1
            elif arg.name in self.constants:
                tokens.append(consts.encode(arg, self.constants[arg.name]))
            elif consts.is_tensor_arg(arg):
                slot_kind = consts.tensor_kind(arg)
                tokens.append({"Tensor[]": "T", "Tensor?[]": "Q"}.get(slot_kind, f"t{n_tensor}"))
                n_tensor += slot_kind not in ("Tensor[]", "Tensor?[]")
            else:
                tokens.append("D")
        return " ".join(tokens)
