"""The benchmarked ops: inputs per size, torch's reference, ATen's out= call, the ms_aten op and
MindSpore's native equivalents.

Native equivalents are module-level functions of the call-time tensors, so MindSpore's GRAPH
parser can compile them inside an nn.Cell; an op may have several (ops.* and mint.*), each is
measured on its own and reported "n/a" with MindSpore's reason where it has no CPU kernel.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from mindspore import mint, ops

Arrays = list[np.ndarray]
InputMaker = Callable[[np.random.Generator], Arrays]
TorchOut = torch.Tensor | tuple[torch.Tensor, ...]
OutCall = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor]], object]

SLOPE = 0.01  # leaky_relu's default: the seed AOT kernel (csrc/examples) hard-codes it
TOPK = 5
LN_EPS = 1e-5

ELEMENTWISE, REDUCTION, OTHER = "elementwise", "reduction", "other"


@dataclass(frozen=True)
class Native:
    """One native MindSpore equivalent, as reported (label) and as called (fn)."""

    label: str
    fn: Callable


@dataclass(frozen=True)
class OpCase:
    """One benchmarked op.

    aten_out binds torch inputs to a zero-argument ATen out= call writing preallocated buffers.
    chainable: output 0 has the shape and dtype of input 0, so N calls can feed each other.
    indexed: the outputs are (values, indices) of input 0 along its last dim; indices are
    checked by gathering, so ties may be broken either way.
    """

    name: str
    ms_aten: str
    constants: Callable[[Arrays], dict]  # ms_aten.op's constants for these inputs
    sizes: dict[str, InputMaker]
    reference: Callable[..., TorchOut]
    aten_out: Callable[[Sequence[torch.Tensor]], Callable[[], object]]
    natives: tuple[Native, ...]
    kind: str = OTHER
    tolerance: tuple[float, float] = (1e-4, 1e-5)  # rtol, atol
    chainable: bool = True
    indexed: bool = False


def flatten(result: TorchOut) -> list[torch.Tensor]:
    """A torch result as a list of tensors."""
    return [result] if isinstance(result, torch.Tensor) else list(result)


def _bind_like_reference(reference: Callable[..., TorchOut], call: OutCall):
    """An aten_out binder whose buffers are shaped like the reference's outputs."""
    def bind(inputs: Sequence[torch.Tensor]) -> Callable[[], object]:
        outs = [torch.empty_like(t) for t in flatten(reference(*inputs))]
        return lambda: call(inputs, outs)
    return bind


def _fixed(**constants) -> Callable[[Arrays], dict]:
    return lambda arrays: dict(constants)


def _last_dim_shape(arrays: Arrays) -> dict:
    return {"normalized_shape": [arrays[0].shape[-1]]}


def _case(name: str, reference: Callable[..., TorchOut], call: OutCall, **fields) -> OpCase:
    return OpCase(name=name, reference=reference,
                  aten_out=_bind_like_reference(reference, call), **fields)


# ---- inputs --------------------------------------------------------------------------------

def _randn(*shape: int, scale: float = 1.0) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)


def _permutation(n: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.permutation(n).astype(np.int64)


def _indices(n: int, high: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.integers(0, high, n, dtype=np.int64)


def _mask(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.standard_normal(shape) > 0  # about half the elements


def _inputs(*makers: Callable[[np.random.Generator], np.ndarray]) -> InputMaker:
    return lambda rng: [maker(rng) for maker in makers]


def _unary(tiny: bool, small: tuple[int, ...], large: tuple[int, ...]) -> dict[str, InputMaker]:
    sizes = {"small": _inputs(_randn(*small)), "large": _inputs(_randn(*large))}
    return {"tiny": _inputs(_randn(8)), **sizes} if tiny else sizes


SMALL_2D = (16, 64)  # 1k elements
LARGE_2D = (4096, 4096)  # 16M elements


def _layer_norm_sizes() -> dict[str, InputMaker]:
    def sized(rows: int, cols: int) -> InputMaker:
        return _inputs(_randn(rows, cols), _randn(cols), _randn(cols))
    return {"small": sized(*SMALL_2D), "large": sized(*LARGE_2D)}


def _mm_sizes() -> dict[str, InputMaker]:
    def sized(n: int) -> InputMaker:  # 1/sqrt(n) keeps a chain of x @ w bounded
        return _inputs(_randn(n, n), _randn(n, n, scale=n ** -0.5))
    return {"small": sized(16), "large": sized(1024)}


def _conv_sizes() -> dict[str, InputMaker]:
    def sized(batch: int, channels: int, side: int) -> InputMaker:
        scale = (channels * 9) ** -0.5
        return _inputs(_randn(batch, channels, side, side),
                       _randn(channels, channels, 3, 3, scale=scale), _randn(channels))
    return {"small": sized(1, 4, 8), "large": sized(8, 64, 56)}


def _index_select_sizes() -> dict[str, InputMaker]:
    return {"small": _inputs(_randn(*SMALL_2D), _permutation(SMALL_2D[0])),
            "large": _inputs(_randn(*LARGE_2D), _indices(LARGE_2D[0], LARGE_2D[0]))}


def _masked_select_sizes() -> dict[str, InputMaker]:
    return {"small": _inputs(_randn(*SMALL_2D), _mask(*SMALL_2D)),
            "large": _inputs(_randn(*LARGE_2D), _mask(*LARGE_2D))}


def _embedding_sizes() -> dict[str, InputMaker]:
    return {"small": _inputs(_randn(64, 16), _permutation(64)),
            "large": _inputs(_randn(32768, 512), _indices(32768, 32768))}


# ---- native MindSpore equivalents ----------------------------------------------------------

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


# ---- the cases -----------------------------------------------------------------------------

def _layer_norm_out(inputs: Sequence[torch.Tensor]) -> Callable[[], object]:
    x, w, b = inputs
    stats = x.shape[:-1] + (1,)
    out, mean, rstd = torch.empty_like(x), torch.empty(stats), torch.empty(stats)
    return lambda: torch.ops.aten.native_layer_norm.out(x, [x.shape[-1]], w, b, LN_EPS,
                                                        out0=out, out1=mean, out2=rstd)


def _layer_norm_reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], w, b, LN_EPS)


CASES: tuple[OpCase, ...] = (
    _case("relu", F.relu, lambda i, o: torch.ops.aten.relu.out(i[0], out=o[0]),
          ms_aten="relu", constants=_fixed(), sizes=_unary(True, SMALL_2D, LARGE_2D),
          natives=(Native("ops.ReLU", ms_relu), Native("mint.relu", mint_relu)),
          kind=ELEMENTWISE),
    _case("leaky_relu", lambda x: F.leaky_relu(x, SLOPE),
          lambda i, o: torch.ops.aten.leaky_relu.out(i[0], SLOPE, out=o[0]),
          ms_aten="leaky_relu", constants=_fixed(negative_slope=SLOPE),
          sizes=_unary(True, SMALL_2D, LARGE_2D),
          natives=(Native("ops.leaky_relu", ms_leaky_relu),
                   Native("mint.leaky_relu", mint_leaky_relu)),
          kind=ELEMENTWISE),
    _case("gelu", F.gelu, lambda i, o: torch.ops.aten.gelu.out(i[0], out=o[0]),
          ms_aten="gelu", constants=_fixed(), sizes=_unary(False, SMALL_2D, LARGE_2D),
          natives=(Native("ops.gelu", ms_gelu), Native("mint.gelu", mint_gelu)),
          kind=ELEMENTWISE),
    _case("softmax", lambda x: torch.softmax(x, -1),
          lambda i, o: torch.ops.aten.softmax.int_out(i[0], -1, out=o[0]),
          ms_aten="softmax.int", constants=_fixed(dim=-1), sizes=_unary(False, SMALL_2D, LARGE_2D),
          natives=(Native("ops.softmax", ms_softmax), Native("mint.softmax", mint_softmax)),
          kind=REDUCTION),
    OpCase("layer_norm", ms_aten="layer_norm", constants=_last_dim_shape,
           sizes=_layer_norm_sizes(), reference=_layer_norm_reference, aten_out=_layer_norm_out,
           natives=(Native("ops.LayerNorm", ms_layer_norm),
                    Native("mint.layer_norm", mint_layer_norm)),
           kind=REDUCTION, tolerance=(1e-4, 1e-4)),
    _case("sum", lambda x: torch.sum(x, [1]),
          lambda i, o: torch.ops.aten.sum.IntList_out(i[0], [1], out=o[0]),
          ms_aten="sum.dim_IntList", constants=_fixed(dim=[1]),
          sizes=_unary(False, SMALL_2D, LARGE_2D),
          natives=(Native("ops.ReduceSum", ms_sum), Native("mint.sum", mint_sum)),
          kind=REDUCTION, tolerance=(1e-4, 1e-3), chainable=False),
    _case("cumsum", lambda x: torch.cumsum(x, 1),
          lambda i, o: torch.ops.aten.cumsum.out(i[0], 1, out=o[0]),
          ms_aten="cumsum", constants=_fixed(dim=1), sizes=_unary(False, SMALL_2D, LARGE_2D),
          natives=(Native("ops.cumsum", ms_cumsum), Native("mint.cumsum", mint_cumsum)),
          kind=REDUCTION, tolerance=(1e-4, 1e-3)),
    _case("mm", torch.mm, lambda i, o: torch.ops.aten.mm.out(i[0], i[1], out=o[0]),
          ms_aten="mm", constants=_fixed(), sizes=_mm_sizes(),
          natives=(Native("ops.MatMul", ms_mm), Native("mint.mm", mint_mm)),
          tolerance=(1e-4, 1e-4)),
    _case("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1),
          lambda i, o: torch.ops.aten.convolution.out(i[0], i[1], i[2], [1, 1], [1, 1], [1, 1],
                                                      False, [0, 0], 1, out=o[0]),
          ms_aten="conv2d", constants=_fixed(padding=[1, 1]), sizes=_conv_sizes(),
          natives=(Native("ops.conv2d", ms_conv2d), Native("mint.conv2d", mint_conv2d)),
          tolerance=(1e-4, 1e-4)),
    _case("topk", lambda x: torch.topk(x, TOPK),
          lambda i, o: torch.ops.aten.topk.values(i[0], TOPK, values=o[0], indices=o[1]),
          ms_aten="topk", constants=_fixed(k=TOPK), sizes=_unary(False, SMALL_2D, LARGE_2D),
          natives=(Native("ops.topk", ms_topk), Native("mint.topk", mint_topk)),
          chainable=False, indexed=True),
    _case("sort", torch.sort, lambda i, o: torch.ops.aten.sort.values(i[0], values=o[0],
                                                                      indices=o[1]),
          ms_aten="sort", constants=_fixed(), sizes=_unary(False, SMALL_2D, (1024, 4096)),
          natives=(Native("ops.sort", ms_sort), Native("mint.sort", mint_sort)),
          indexed=True),
    _case("index_select", lambda x, index: torch.index_select(x, 0, index),
          lambda i, o: torch.ops.aten.index_select.out(i[0], 0, i[1], out=o[0]),
          ms_aten="index_select", constants=_fixed(dim=0), sizes=_index_select_sizes(),
          natives=(Native("ops.gather", ms_gather_rows),
                   Native("mint.index_select", mint_index_select))),
    _case("embedding", lambda weight, indices: F.embedding(indices, weight),
          lambda i, o: torch.ops.aten.embedding.out(i[0], i[1], out=o[0]),
          ms_aten="embedding", constants=_fixed(), sizes=_embedding_sizes(),
          natives=(Native("ops.gather", ms_gather_rows),
                   Native("mint.embedding", mint_embedding))),
    # Its output size depends on the mask: GRAPH mode pads it (ms_aten/ops/bounded.py).
    _case("masked_select", torch.masked_select,
          lambda i, o: torch.ops.aten.masked_select.out(i[0], i[1], out=o[0]),
          ms_aten="masked_select", constants=_fixed(), sizes=_masked_select_sizes(),
          natives=(Native("ops.masked_select", ms_masked_select),
                   Native("mint.masked_select", mint_masked_select)),
          chainable=False),
)


def by_name(names: Sequence[str]) -> list[OpCase]:
    """The cases called `names`, in that order."""
    table = {case.name: case for case in CASES}
    return [table[name] for name in names]
