"""In-place writes inside a grad-disabled region to a tensor that requires grad, with torch's
meaning (docs/porting.md, "Autograd inside forward").

torch: `h = lin(x)` then `with torch.no_grad(): h.clamp_(-0.1, 0.1)` (or `.copy_`, `.mul_`,
`h[...] = v`, under `set_grad_enabled(False)` or in a `@torch.no_grad()` helper) writes h's
values, and autograd never sees the write: later uses of h read the written values, and the
gradient reaching h flows on to lin and x as if through identity (the in-place
straight-through idiom). keep_grad_regions detaches a region's inputs, so the write would land
on a detached alias and cut that gradient. For a region input the region writes, `straighten`
passes the region a copy to write, and every later use of h reads

    new = written - nan_to_num(h.detach() - h)

whose value is `written` exactly (the subtrahend is +0.0 everywhere, -0.0 kept) and whose
gradient reaches h as identity. Where h holds inf or NaN, nan_to_num's derivative is zero, so
no gradient flows there (torch passes it on); docs/limits.md says so.

Refused by name: a region that writes a parameter (torch changes the weight for good: do it
outside forward, or as a parametrization), a view of another tensor, or a tensor whose views,
taken before the region, are read after it (those views would keep the old values).
"""
from __future__ import annotations

import operator
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind

from ...ops.schema import is_written
from ..base import CaptureError

aten = torch.ops.aten


def _alias_of_first(node: torch.fx.Node) -> tuple[bool, bool] | None:
    """(whole, written) when `node` returns an alias of its first argument: whole when the alias
    is the same tensor (an in-place op's result), written when the op writes it; None when its
    result is no alias of it. A view, detach or alias is a tensor of its own."""
    if node.op != "call_function":
        return None
    if node.target is operator.getitem:  # an element of a view op's list (split, unbind)
        source = node.args[0]
        views = (isinstance(source, torch.fx.Node)
                 and isinstance(source.target, torch._ops.OpOverload)
                 and any(r.alias_info is not None for r in source.target._schema.returns))
        return (False, False) if views else None
    if not isinstance(node.target, torch._ops.OpOverload):
        return None
    schema = node.target._schema
    if not schema.arguments or not schema.returns:
        return None
    first, ret = schema.arguments[0].alias_info, schema.returns[0].alias_info
    if first is None or ret is None or not set(first.before_set) & set(ret.after_set):
        return None
    written = is_written(schema.arguments[0])
    return written, written


def _aliases(root: torch.fx.Node) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
    """The nodes that alias `root` (it included): those that are all of it, and the views of a
    part of it, in graph order."""
    whole: list[torch.fx.Node] = [root]
    part: list[torch.fx.Node] = []
    stack = [(root, True)]
    seen = {root}
    while stack:
        node, is_whole = stack.pop()
        for user in node.users:
            alias = _alias_of_first(user)
            if user in seen or alias is None or user.args[0] is not node:
                continue
            seen.add(user)
            user_whole = is_whole and alias[0]
            (whole if user_whole else part).append(user)
            stack.append((user, user_whole))
    return whole, part


def _writes(node: torch.fx.Node, targets: set[torch.fx.Node]) -> bool:
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    for position, arg in enumerate(node.target._schema.arguments):
        if is_written(arg):
            given = (node.args[position] if position < len(node.args)
                     else node.kwargs.get(arg.name))
            if given in targets or (isinstance(given, (list, tuple))
                                    and any(g in targets for g in given)):
                return True
    return False


def _where(node: torch.fx.Node) -> str:
    """The user's line that made a node, from torch.export's stack trace."""
    frames = [line.strip() for line in (node.meta.get("stack_trace") or "").splitlines()
              if line.strip().startswith("File ")]
    return frames[-1] if frames else node.name


def written(body: torch.fx.GraphModule) -> dict[int, torch.fx.Node]:
    """The region's inputs (by position) that it writes in place, each with the writing node."""
    found = {}
    placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
    for index, placeholder in enumerate(placeholders):
        whole, part = _aliases(placeholder)
        targets = set(whole) | set(part)
        writer = next((n for n in body.graph.nodes if _writes(n, targets)), None)
        if writer is not None:
            found[index] = writer
    return found


def straighten(gm: torch.fx.GraphModule, region: torch.fx.Node, body: torch.fx.GraphModule,
               index: int, detached: torch.fx.Node, writer: torch.fx.Node, name: str) -> None:
    """Gives the region's written input `index` torch's meaning (the module's docstring):
    `detached` is the body's detached alias of that input (its placeholder's one user),
    `writer` the node writing it."""
    value = region.args[2 + index]
    assert isinstance(value, torch.fx.Node)
    meta = value.meta.get("val")
    if value.op == "placeholder" or not (isinstance(meta, torch.Tensor)
                                         and meta.is_floating_point()):
        return  # a weight or an input: torch.export records the write (refuse_parameter_writes)
    graph = gm.graph
    order = {node: i for i, node in enumerate(graph.nodes)}
    where = _where(writer)
    root = value  # the tensor: the node before the in-place ops that returned it
    while (first := _alias_of_first(root)) is not None and first[0]:
        parent = root.args[0]
        assert isinstance(parent, torch.fx.Node)
        root = parent
    if _alias_of_first(root) is not None:
        raise CaptureError(f"ms_aten: {name}: an in-place write under no_grad to a view of "
                           f"another tensor ({where}), which would cut that tensor's gradient; "
                           f"write the tensor itself")
    whole, part = _aliases(root)
    if any(order[view] < order[region] < order[u] for view in part for u in view.users):
        raise CaptureError(f"ms_aten: {name}: an in-place write under no_grad ({where}) to a "
                           f"tensor whose views, taken before it, are read after it (they would "
                           f"read the old values); take the views after the write")
    # The body's outputs that are the written tensor; a part of it leaving is refused.
    body_whole, body_part = _aliases(detached)
    output = next(n for n in body.graph.nodes if n.op == "output")
    results = list(output.args[0])
    if any(r in body_part for r in results):
        raise CaptureError(f"ms_aten: {name}: an in-place write under no_grad ({where}) to a "
                           f"tensor of which the no_grad block hands a view on; take the view "
                           f"after the block")
    same = [i for i, r in enumerate(results) if r in body_whole]
    output.args = ((*results, detached),)
    body.recompile()
    with graph.inserting_before(region):
        copy = graph.call_function(aten.clone.default, (value,))
    copy.meta["val"] = meta
    region.update_arg(2 + index, copy)
    later = [n for n in graph.nodes if order.get(n, -1) > order[region]]
    with graph.inserting_after(region):
        result = graph.call_function(operator.getitem, (region, len(results)))
    result.meta["val"] = meta
    new = _written_values_identity_gradient(graph, result, result, value, meta)
    for user in later:
        for alias in whole:
            user.replace_input_with(alias, new)
        if user.target is operator.getitem and user.args[0] is region and user.args[1] in same:
            user.replace_all_uses_with(new)


def refuse_parameter_writes(exported: ExportedProgram, name: str) -> None:
    """CaptureError naming a parameter that forward writes in place (under no_grad): torch
    changes the weight for good at each call, a Cell's Parameters change only in an optimizer's
    step."""
    for spec in exported.graph_signature.output_specs:
        if spec.kind == OutputKind.PARAMETER_MUTATION:
            raise CaptureError(
                f"ms_aten: {name} writes its parameter '{spec.target}' in place in forward; a "
                f"Cell's Parameters change only in an optimizer's step: do the write outside "
                f"forward (before the call), or make it a parametrization "
                f"(torch.nn.utils.parametrize), whose result forward computes")


def straighten_detached_writes(gm: torch.fx.GraphModule, name: str) -> None:
    """`h.detach().clamp_(...)` in a grad-enabled graph: torch writes h's values and autograd
    never sees it, as under no_grad. Functionalized as it comes, the write would become h's
    new value with no gradient. The detached alias is made of a copy of h, and each use of h
    after the last write reads `copy - nan_to_num(h.detach() - h)` (the written values,
    identity gradient to h); a read of h between two such writes is refused."""
    graph = gm.graph
    for detach in [n for n in graph.nodes if n.op == "call_function"
                   and n.target is aten.detach.default]:
        whole, part = _aliases(detach)
        targets = set(whole) | set(part)
        writer = next((n for n in graph.nodes if _writes(n, targets)), None)
        value = detach.args[0]
        if writer is None or not isinstance(value, torch.fx.Node) or value.op != "call_function":
            continue
        meta = value.meta.get("val")
        if not (isinstance(meta, torch.Tensor) and meta.is_floating_point()):
            continue
        where = _where(writer)
        order = {node: i for i, node in enumerate(graph.nodes)}
        kind = _alias_of_first(value)
        if kind is not None and not kind[0]:
            raise CaptureError(f"ms_aten: {name}: an in-place write through .detach() of a view "
                               f"({where}); write under torch.no_grad() to the tensor itself")
        tensor_whole, tensor_part = _aliases(value)
        if any(order[view] < order[detach] < order[u] for view in tensor_part
               for u in view.users) or any(order[n] > order[detach] and _alias_of_first(n)
                                           for n in tensor_whole[1:]):
            raise CaptureError(f"ms_aten: {name}: an in-place write through .detach() "
                               f"({where}) to a tensor written or viewed around it; write "
                               f"under torch.no_grad() to the tensor itself")
        last = max((n for n in graph.nodes if _writes(n, targets)), key=order.__getitem__)
        later = [u for alias in tensor_whole for u in alias.users if order[u] > order[detach]]
        if any(order[u] < order[last] for u in later):
            raise CaptureError(f"ms_aten: {name}: an in-place write through .detach() "
                               f"({where}) to a tensor read between it and a later such write; "
                               f"write under torch.no_grad() to the tensor itself")
        with graph.inserting_before(detach):
            copy = graph.call_function(aten.clone.default, (value,))
        detach.update_arg(0, copy)
        copy.meta["val"] = meta
        new = _written_values_identity_gradient(graph, last, copy, value, meta)
        for user in later:
            for alias in tensor_whole:
                user.replace_input_with(alias, new)
    gm.recompile()


def _written_values_identity_gradient(graph: torch.fx.Graph, after: torch.fx.Node,
                                      written: torch.fx.Node, value: torch.fx.Node,
                                      meta: Any) -> torch.fx.Node:
    """`written - nan_to_num(value.detach() - value)`, inserted after `after`: the written
    values, and to autograd the identity of `value` (the write invisible to it, as in torch)."""
    with graph.inserting_after(after):
        frozen = graph.call_function(aten.detach.default, (value,))
    with graph.inserting_after(frozen):
        zero = graph.call_function(aten.sub.Tensor, (frozen, value))
    with graph.inserting_after(zero):
        finite = graph.call_function(aten.nan_to_num.default, (zero, 0.0, 0.0, 0.0))
    with graph.inserting_after(finite):
        new = graph.call_function(aten.sub.Tensor, (written, finite))
    for node in (frozen, zero, finite, new):
        node.meta["val"] = meta
    return new
