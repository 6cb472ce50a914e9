"""A decoding program's grouped-query attention on the cache's own key/value heads.

Under torch.export transformers' SDPA attention repeats each key/value head over its group of
query heads (`repeat_kv`: unsqueeze, expand, a contiguous copy, a view) before
scaled_dot_product_attention, so every decode step copies the attended cache prefix n_rep
times, in every layer. ATen's SDPA takes the grouping itself (`enable_gqa=True`, query head h
reading key/value head h // n_rep, as repeat_kv orders them): this pass feeds it the
unrepeated heads. Measured on the 2-core CPU here, torch alone, 16 query heads over 4 of 64
(the benchmark Llama's attention), 108 attended positions: the outputs are bitwise equal, in
float32 and bfloat16, and one layer's decode attention takes 0.03-0.06 / 0.11-0.12 / 0.38-0.49
ms instead of 0.10-0.12 / 0.24 / 0.93 ms at batches 1 / 4 / 16 in float32 (docs/decoding.md).
Eager `model.generate` avoids the copy its own way (transformers' pack_gqa, which it skips
while compiling).
"""
from __future__ import annotations

import torch

_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_VIEWS = (torch.ops.aten._unsafe_view.default, torch.ops.aten.view.default,
          torch.ops.aten.reshape.default)


def _shape(node: torch.fx.Node) -> tuple | None:
    value = node.meta.get("val")
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _unrepeated(node: torch.fx.Node) -> torch.fx.Node | None:
    """The (batch, kv_heads, length, dim) tensor that repeat_kv made `node` from, or None: a
    view to (batch, kv_heads * n_rep, length, dim) of a (contiguous copy of an) expand to
    (batch, kv_heads, n_rep, length, dim) of its unsqueeze at dim 2."""
    if node.op != "call_function" or node.target not in _VIEWS:
        return None
    expanded = node.args[0]
    if isinstance(expanded, torch.fx.Node) and expanded.target is torch.ops.aten.clone.default:
        expanded = expanded.args[0]
    if not (isinstance(expanded, torch.fx.Node)
            and expanded.target is torch.ops.aten.expand.default):
        return None
    unsqueezed = expanded.args[0]
    if not (isinstance(unsqueezed, torch.fx.Node)
            and unsqueezed.target is torch.ops.aten.unsqueeze.default
            and unsqueezed.args[1] == 2 and isinstance(unsqueezed.args[0], torch.fx.Node)):
        return None
    source = unsqueezed.args[0]
    heads, grouped, repeated = _shape(source), _shape(expanded), _shape(node)
    if heads is None or grouped is None or repeated is None or len(heads) != 4:
        return None
    batch, kv_heads, length, dim = heads
    n_rep = grouped[2]
    if not (_same(grouped, (batch, kv_heads, n_rep, length, dim))
            and _same(repeated, (batch, kv_heads * n_rep, length, dim))):
        return None
    return source


def _same(shape: tuple, other: tuple) -> bool:
    """Equal shapes, a symbolic size (the attended length) equal to the same symbol: compared
    by name, which asks the finished capture's shape environment nothing."""
    return len(shape) == len(other) and all(str(a) == str(b) for a, b in zip(shape, other,
                                                                              strict=True))


def rewrite(graph_module: torch.fx.GraphModule) -> int:
    """Each scaled_dot_product_attention whose key and value repeat_kv repeated takes them
    unrepeated, with enable_gqa, in place; the number rewritten (the copies go with the dead
    code)."""
    count = 0
    for node in graph_module.graph.find_nodes(op="call_function", target=_SDPA):
        query, key, value = node.args[:3]
        keys, values = _unrepeated(key), _unrepeated(value)
        if keys is None or values is None or node.kwargs.get("enable_gqa"):
            continue
        node.args = (query, keys, values, *node.args[3:])
        node.kwargs = {**node.kwargs, "enable_gqa": True}
        count += 1
    if count:
        graph_module.graph.eliminate_dead_code()
        graph_module.recompile()
    return count
