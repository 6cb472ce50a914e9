"""How one call fills an op's tensor slots: a tensor, a Python number, nothing, or a list of n.

    op = ms_aten.op("add.Tensor")
    op(x, y)        # the base pattern: every slot a tensor
    op(x, 1)        # ('t', 'n'): a number where torch would wrap it as a 0-dim tensor
    ms_aten.op("layer_norm", normalized_shape=[4])(x)    # ('t', '-', '-'): optionals omitted
    ms_aten.op("layer_norm", normalized_shape=[4])(x, None, b)    # ('t', '-', 't'): or None
    ms_aten.op("lstm.input", ...)(x, (h, c), params)     # ('t', 2, 8): two tensor lists

The base pattern (None) is what the op spec of ms_aten.op describes: every slot filled by a
tensor and at most one tensor list, of any length (csrc/op/spec.h, token T). Any other pattern
needs its own spec, with explicit call-time indices for each slot (binding.py), and in GRAPH
mode its own bprop arity, which is why an op object's first call through MindSpore's Custom
route fixes it (op.py explains).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mindspore.common import dtype as mstype

from .binding import Binding

TENSOR, NUMBER, OMITTED = "t", "n", "-"  # OMITTED: left out, or None
# Per slot: TENSOR, NUMBER, OMITTED, a list length, or for a Tensor?[] with None holes a tuple
# of TENSOR / OMITTED entries.
Fill = str | int | tuple
Pattern = tuple[Fill, ...]


# The MindSpore dtype of the 0-dim tensor torch makes of a Python number (c10::scalar_to_tensor).
_NUMBER_DTYPES = ((bool, mstype.bool_), (int, mstype.int64), (float, mstype.float64),
                  (complex, mstype.complex128))


def number_dtype(value: bool | int | float | complex) -> Any:
    """The MindSpore dtype torch gives a Python number it wraps (float: double)."""
    return next(dtype for kind, dtype in _NUMBER_DTYPES if isinstance(value, kind))


def is_number(value: Any) -> bool:
    """A Python number, which may fill a Tensor slot (torch wraps it as a 0-dim tensor)."""
    return isinstance(value, (bool, int, float, complex))


def needs_explicit(binding: Binding) -> bool:
    """Ops the base pattern cannot describe: two tensor lists (lstm.input), or a tensor list in
    and out (meshgrid): their list lengths must be in the spec."""
    lists = sum(slot.is_list for slot in binding.slots)
    return lists > 1 or (lists == 1 and binding.returns_list)


def _check(binding: Binding, pattern: Sequence[Fill]) -> Pattern | None:
    """The pattern, or None if it is the base pattern; TypeError if it cannot call the op."""
    slots = binding.slots
    if len(pattern) > len(slots):
        raise TypeError(f"ms_aten op '{binding.name}' takes {len(slots)} call-time arguments "
                        f"({', '.join(s.name for s in slots)}), got {len(pattern)}")
    pattern = tuple(pattern) + (OMITTED,) * (len(slots) - len(pattern))
    for slot, fill in zip(slots, pattern, strict=True):
        if isinstance(fill, tuple) and slot.kind != "Tensor?[]":
            raise TypeError(f"ms_aten op '{binding.name}': argument '{slot.name}' ({slot.kind}) "
                            f"takes tensors only, got None in it")
        if slot.is_list and not isinstance(fill, (int, tuple)):
            what = "nothing" if fill == OMITTED else "a number" if fill == NUMBER else "a tensor"
            raise TypeError(f"ms_aten op '{binding.name}': argument '{slot.name}' ({slot.kind}) "
                            f"takes a tuple or list of tensors, got {what}")
        if not slot.is_list and isinstance(fill, (int, tuple)):
            raise TypeError(f"ms_aten op '{binding.name}': argument '{slot.name}' ({slot.kind}) "
                            f"takes a tensor, got a tuple")
        if fill == OMITTED and slot.kind != "Tensor?":
            given = sum(f != OMITTED for f in pattern)
            raise TypeError(f"ms_aten op '{binding.name}' takes "
                            f"{sum(s.kind != 'Tensor?' for s in slots)} tensors "
                            f"({', '.join(s.name for s in slots)}), got {given}; only Tensor? "
                            f"arguments may be None or, at the end, left out")
    if not needs_explicit(binding) and all(f == TENSOR or isinstance(f, int) for f in pattern):
        return None
    return pattern


def _list_fill(entries: Sequence[bool]) -> Fill:
    """A list's fill from which entries are present: its length, or the entries with holes."""
    if all(entries):
        return len(entries)
    return tuple(TENSOR if present else OMITTED for present in entries)


def from_call(binding: Binding, args: Sequence[Any]) -> Pattern | None:
    """The pattern of op(*args) in PYNATIVE mode (tuples and lists fill tensor-list slots)."""
    return _check(binding, [_list_fill([x is not None for x in a]) if isinstance(a, (tuple, list))
                            else NUMBER if is_number(a) else OMITTED if a is None else TENSOR
                            for a in args])


def from_infer_args(binding: Binding, args: Sequence[dict]) -> Pattern | None:
    """The pattern of MindSpore's infer arguments: a tuple input carries a tuple of dtypes, a
    Python number a number type where a tensor carries a TensorType."""
    fills: list[Fill] = []
    for arg in args:
        dtype = arg["dtype"]
        if isinstance(dtype, (tuple, list)):
            fills.append(_list_fill([isinstance(d, mstype.TensorType) for d in dtype]))
        elif dtype is None:  # a None argument
            fills.append(OMITTED)
        else:
            fills.append(TENSOR if isinstance(dtype, mstype.TensorType) else NUMBER)
    return _check(binding, fills)


def items_of(fill) -> int:
    """Flat call-time items one slot's fill takes."""
    if isinstance(fill, int):
        return fill
    if isinstance(fill, tuple):
        return sum(entry == TENSOR for entry in fill)
    return int(fill != OMITTED)


def group(binding: Binding, pattern: Pattern | None, flat: Sequence[Any]) -> list[Any]:
    """Flat call-time items -> one item per slot: a list for a tensor-list slot, None for an
    omitted one. The base pattern gives the one list whatever the fixed slots leave."""
    if pattern is None:
        return _group_base(binding, flat)
    grouped: list[Any] = []
    i = 0
    for fill in pattern:
        if isinstance(fill, int):
            grouped.append(list(flat[i:i + fill]))
            i += fill
        elif isinstance(fill, tuple):
            entries = []
            for entry in fill:
                entries.append(flat[i] if entry == TENSOR else None)
                i += entry == TENSOR
            grouped.append(entries)
        elif fill == OMITTED:
            grouped.append(None)
        else:
            grouped.append(flat[i])
            i += 1
    if i != len(flat):
        raise TypeError(f"ms_aten op '{binding.name}': {len(flat)} call-time tensors do not fit "
                        f"the call pattern {pattern}")
    return grouped


def _group_base(binding: Binding, flat: Sequence[Any]) -> list[Any]:
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
    end = len(flat) - (n_fixed - position)
    return [*flat[:position], list(flat[position:end]), *flat[end:]]


def describe(pattern: Pattern | None) -> str:
    """For messages: 'tensors in every slot', or e.g. '(tensor, number, omitted, list of 8)'."""
    if pattern is None:
        return "tensors in every slot"

    def name(fill) -> str:
        if isinstance(fill, tuple):
            return "list " + "".join("T" if e == TENSOR else "_" for e in fill)
        return {TENSOR: "tensor", NUMBER: "number", OMITTED: "omitted"}.get(fill, f"list of {fill}")
    return "(" + ", ".join(map(name, pattern)) + ")"
