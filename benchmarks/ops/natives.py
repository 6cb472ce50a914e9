"""MindSpore's native equivalents of the benchmarked ops (ops/cases.py), by op name.

They are module-level functions of the call-time tensors, so MindSpore's GRAPH parser can
compile them inside an nn.Cell; an op may have several (ops.* and mint.*), each is measured on
its own and reported "n/a" with MindSpore's reason where it has no CPU kernel.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mindspore import mint, ops

from benchmarks.ops.cases import LN_EPS, SLOPE, TOPK


@dataclass(frozen=True)
class Native:
    """One native MindSpore equivalent, as reported (label) and as called (fn)."""

    label: str
    fn: Callable


_RELU = ops.ReLU()
_REDUCE_SUM = ops.ReduceSum()
_MATMUL = ops.MatMul()
_LAYER_NORM = ops.LayerNorm(begin_norm_axis=-1, begin_params_axis=-1, epsilon=LN_EPS)


def ms_relu(x):
    return _RELU(x)


def mint_relu(x):
    return mint.nn.functional.relu(x)


def ms_leaky_relu(x):
    return ops.leaky_relu(x, SLOPE)


def mint_leaky_relu(x):
    return mint.nn.functional.leaky_relu(x, SLOPE)


def ms_gelu(x):
    return ops.gelu(x)


def mint_gelu(x):
    return mint.nn.functional.gelu(x)


def ms_softmax(x):
    return ops.softmax(x, -1)


def mint_softmax(x):
    return mint.nn.functional.softmax(x, -1)


def ms_layer_norm(x, w, b):
    return _LAYER_NORM(x, w, b)[0]


def mint_layer_norm(x, w, b):
    return mint.nn.functional.layer_norm(x, x.shape[-1:], w, b, LN_EPS)


def ms_sum(x):
    return _REDUCE_SUM(x, 1)


def mint_sum(x):
    return mint.sum(x, 1)


def ms_mm(a, b):
    return _MATMUL(a, b)


def mint_mm(a, b):
    return mint.mm(a, b)


def ms_conv2d(x, w, b):
    return ops.conv2d(x, w, b, 1, "pad", 1)


def mint_conv2d(x, w, b):
    return mint.nn.functional.conv2d(x, w, b, 1, 1)


def ms_topk(x):
    return ops.topk(x, TOPK)


def mint_topk(x):
    return mint.topk(x, TOPK)


def ms_sort(x):
    return ops.sort(x)


def mint_sort(x):
    return mint.sort(x)


def ms_cumsum(x):
    return ops.cumsum(x, 1)


def mint_cumsum(x):
    return mint.cumsum(x, 1)


def ms_gather_rows(x, index):
    return ops.gather(x, index, 0)


def mint_index_select(x, index):
    return mint.index_select(x, 0, index)


def ms_masked_select(x, mask):
    return ops.masked_select(x, mask)


def mint_masked_select(x, mask):
    return mint.masked_select(x, mask)


def mint_embedding(weight, indices):
    return mint.nn.functional.embedding(indices, weight)



NATIVES: dict[str, tuple[Native, ...]] = {
    "relu": (Native("ops.ReLU", ms_relu),
             Native("mint.relu", mint_relu)),
    "leaky_relu": (Native("ops.leaky_relu", ms_leaky_relu),
                   Native("mint.leaky_relu", mint_leaky_relu)),
    "gelu": (Native("ops.gelu", ms_gelu),
             Native("mint.gelu", mint_gelu)),
    "softmax": (Native("ops.softmax", ms_softmax),
                Native("mint.softmax", mint_softmax)),
    "layer_norm": (Native("ops.LayerNorm", ms_layer_norm),
                   Native("mint.layer_norm", mint_layer_norm)),
    "sum": (Native("ops.ReduceSum", ms_sum),
            Native("mint.sum", mint_sum)),
    "cumsum": (Native("ops.cumsum", ms_cumsum),
               Native("mint.cumsum", mint_cumsum)),
    "mm": (Native("ops.MatMul", ms_mm),
           Native("mint.mm", mint_mm)),
    "conv2d": (Native("ops.conv2d", ms_conv2d),
               Native("mint.conv2d", mint_conv2d)),
    "topk": (Native("ops.topk", ms_topk),
             Native("mint.topk", mint_topk)),
    "sort": (Native("ops.sort", ms_sort),
             Native("mint.sort", mint_sort)),
    "index_select": (Native("ops.gather", ms_gather_rows),
                     Native("mint.index_select", mint_index_select)),
    "embedding": (Native("ops.gather", ms_gather_rows),
                  Native("mint.embedding", mint_embedding)),
    "masked_select": (Native("ops.masked_select", ms_masked_select),
                      Native("mint.masked_select", mint_masked_select)),
}
