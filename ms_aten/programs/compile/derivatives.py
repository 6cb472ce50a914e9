"""Which graph inputs a program's backward differentiates, and which ops without an autograd
kernel a gradient from them would pass through.

torch's autograd fallback serves an op that torch registers no autograd kernel for (oneDNN's
mkldnn:: inference ops, which `replace=` can put into a graph; a torch.library op given a CPU
kernel alone): it only warns and passes zeros back, unless the kernel recorded a history of its
own (a Python kernel running torch ops does). The interpreted program's VJP sees which at run
time and refuses the first kind (csrc/op/grad.h); a compiled backward is AOTAutograd's trace,
which would keep the zeros, so compile= does not compile a backward through such an op
(compiled.py: the program then runs interpreted).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.export.graph_signature import InputKind, InputSpec

from ...native import library


def differentiated(value: Any, spec: InputSpec, differentiable: Callable[[InputSpec], bool]
                   ) -> bool:
    """Whether a program's backward differentiates a graph input (`value`: its placeholder's
    meta value): a floating user input, or a floating parameter that `differentiable` names."""
    return isinstance(value, torch.Tensor) and value.is_floating_point() and (
        spec.kind == InputKind.USER_INPUT
        or (spec.kind == InputKind.PARAMETER and differentiable(spec)))


def _floating(node: torch.fx.Node) -> bool:
    """Whether a node's value is, or holds, a floating tensor (a gradient can flow along it)."""
    value = node.meta.get("val")
    values = value if isinstance(value, (list, tuple)) else [value]
    return any(isinstance(v, torch.Tensor) and v.is_floating_point() for v in values)


def without_autograd(graph: torch.fx.Graph, sources: Iterable[torch.fx.Node]) -> list[str]:
    """The ops torch registers no autograd kernel for (by name, in graph order, each once) at
    the nodes a gradient from `sources` (differentiated inputs) would pass through."""
    reached = set(sources)
    found: dict[str, None] = {}
    for node in graph.nodes:
        if node.op != "call_function" or not any(
                a in reached and _floating(a) for a in node.all_input_nodes):
            continue
        reached.add(node)
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and not library.has_autograd(
                target._schema.name, target._schema.overload_name):
            found[target.name()] = None
    return list(found)
