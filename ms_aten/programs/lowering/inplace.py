"""Buffers a program updates (a KV cache, BatchNorm's running statistics), written in place.

torch.export gives each updated buffer's new value as an output of the graph (a BUFFER_MUTATION
in its signature). A program writes it into the buffer's own memory instead, MindSpore's
Parameter (csrc/program/program.h):
- re-inplaced: where the node computing the new value has an in-place variant that writes its
  first argument (`index_copy` -> `index_copy_`, `index_put` -> `index_put_`, `add` -> `add_`;
  `slice_scatter` / `select_scatter` -> `copy_` into the slice), that argument is the buffer,
  and nothing else reads the buffer's old value, the program runs the in-place variant on the
  buffer: nothing is copied, and the node's result is the buffer itself;
- otherwise the new value is copied into the buffer after the program (`c` lines): BatchNorm's
  running statistics, which one node computes beside its output;
- where the graph gives the buffer itself as its new value, a node of it wrote the buffer as an
  argument its schema writes (compile=True's `ms_aten.compiled.writes`, compile/compiled.py):
  nothing is left to do.
torch.fx.passes.reinplace does not fit: it never re-inplaces a graph input (its step 1b), and a
buffer is one here. The VJP runs the functional graph, which writes nothing.

A backward that finds no kept autograd graph runs the forward again on the buffers' new values.
That gives the same outputs where the outputs read the old values only through an overwrite of
the written region (index_copy: the rows it writes come from its source either way) or not at
all (BatchNorm in training reads its running statistics only for their update): `exact`.
"""
from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from ...ops.schema import is_written
from . import symbolic

aten = torch.ops.aten

# Functional scatters into a view of their first argument: the view op the source is copied into,
# which takes the scatter's arguments after `src` (the dim, the range or index).
SCATTER_VIEWS: dict[torch._ops.OpOverload, torch._ops.OpOverload] = {
    aten.slice_scatter.default: aten.slice.Tensor,
    aten.select_scatter.default: aten.select.int,
}
# Ops whose result equals their first argument outside a region it overwrites wholly, from other
# arguments: running one again on its own result gives the same result.
_OVERWRITES = {aten.index_copy.default, aten.copy.default, aten.index_put.default,
               *SCATTER_VIEWS}
# BatchNorm in training: results 0-2 do not read the running statistics (arguments 3 and 4),
# results 3 and 4 are their update.
_BATCH_NORM = aten._native_batch_norm_legit_functional.default


@dataclass(frozen=True)
class Write:
    """How a program writes one updated buffer."""

    buffer: str  # its name in the module
    placeholder: torch.fx.Node  # its input in the graph
    value: torch.fx.Node  # the node computing its new value
    # The op run on the buffer instead of value's own: its in-place variant, or for a scatter
    # the view the source is copied into; for a buffer the graph wrote already, the op that
    # wrote it; None: the value is copied into the buffer at the end.
    inplace: torch._ops.OpOverload | None


def inplace_variant(op: object) -> torch._ops.OpOverload | None:
    """The in-place overload of an ATen op that writes its first argument and takes the same
    arguments (index_copy -> index_copy_), or None."""
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return None
    if op in SCATTER_VIEWS:
        return SCATTER_VIEWS[op]
    packet = getattr(aten, op.overloadpacket.__name__ + "_", None)
    if packet is None or op._overloadname not in packet.overloads():
        return None
    inplace = getattr(packet, op._overloadname)
    args, inplace_args = op._schema.arguments, inplace._schema.arguments
    first = inplace_args[0].alias_info if inplace_args else None
    same = len(args) == len(inplace_args) and all(
        (a.name, str(a.type)) == (b.name, str(b.type))
        for a, b in zip(args, inplace_args, strict=True))
    return inplace if same and first is not None and first.is_write else None


def _reads_values(user: torch.fx.Node) -> bool:
    """Whether a node reads a tensor's values, not only its sizes: a size, or a view whose only
    readers are functional copies into it (`buf[:, 2:4] = x` gives slice(buf), copy(that, x),
    slice_scatter(buf, ..), where copy's result is x's values in the slice's shape), reads none."""
    if symbolic.scalar_function(user.target) is not None:
        return False
    return not (user.target in SCATTER_VIEWS.values() and user.users and all(
        u.target is aten.copy.default and u.args[0] is user and user not in u.args[1:]
        for u in user.users))


def _same_layout(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)
            and va.dtype == vb.dtype and [str(n) for n in va.shape] == [str(n) for n in vb.shape])


def writes(node: torch.fx.Node, value: torch.fx.Node) -> bool:
    """Whether `node` writes `value` in place: passes it as an argument its schema writes."""
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    for position, arg in enumerate(node.target._schema.arguments):
        if not is_written(arg):
            continue
        given = node.args[position] if position < len(node.args) else node.kwargs.get(arg.name)
        if given is value or (isinstance(given, (list, tuple)) and value in given):
            return True
    return False


def plan(buffer: str, placeholder: torch.fx.Node, value: torch.fx.Node) -> Write:
    """How the program writes `buffer` (input `placeholder`), whose new value `value` computes."""
    if value is placeholder:
        writer = next((u for u in placeholder.users if writes(u, placeholder)), None)
        if writer is None:
            raise ValueError(f"the graph gives buffer {buffer} as its own new value, but no "
                             f"node writes it")
        assert isinstance(writer.target, torch._ops.OpOverload)  # writes() checked it
        return Write(buffer, placeholder, value, writer.target)
    inplace = None
    if (value.op == "call_function" and value.args and value.args[0] is placeholder
            and _same_layout(value, placeholder)
            and not any(_reads_values(u) for u in placeholder.users if u is not value)):
        inplace = inplace_variant(value.target)
    return Write(buffer, placeholder, value, inplace)


def _ancestors(nodes: Iterable[torch.fx.Node]) -> set[torch.fx.Node]:
    seen: set[torch.fx.Node] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    return seen


def _overwrites(node: torch.fx.Node) -> bool:
    accumulate = node.target is aten.index_put.default and (
        (len(node.args) > 3 and node.args[3]) or node.kwargs.get("accumulate"))
    return node.target in _OVERWRITES and not accumulate


def exact(writes: Sequence[Write], outputs: Sequence[torch.fx.Node]) -> bool:
    """Whether running the forward again on the buffers' new values gives the same `outputs`."""
    needed = _ancestors(outputs)
    for write in writes:
        if write.value is write.placeholder:
            # Written by an op of the graph (compiled.writes), which has no backward and
            # refuses a gradient itself: nothing will recompute it.
            continue
        for reader in write.placeholder.users:
            if reader not in needed or not _reads_values(reader):
                continue
            if reader is write.value and _overwrites(reader):
                continue
            if reader.target is _BATCH_NORM and reader.args[5] is True and not any(
                    u.target is operator.getitem and u.args[1] in (3, 4) and u in needed
                    for u in reader.users):
                continue
            return False
    return True
