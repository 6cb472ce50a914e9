"""The benchmarked ops: inputs per size, torch's reference, ATen's out= call and the ms_aten op
(MindSpore's native equivalents are in ops/natives.py).

Imports torch only: the op benchmark's torch worker (ops/worker_torch.py) times ATen's out= calls
in a process that never imports MindSpore.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

Arrays = list[np.ndarray]
InputMaker = Callable[[np.random.Generator], Arrays]
TorchOut = torch.Tensor | tuple[torch.Tensor, ...]
OutCall = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor]], object]

SLOPE = 0.01  # leaky_relu's default: the seed AOT kernel (csrc/examples) hard-codes it
TOPK = 5
LN_EPS = 1e-5

ELEMENTWISE, REDUCTION, OTHER = "elementwise", "reduction", "other"


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
    kind: str = OTHER
    tolerance: tuple[float, float] = (1e-4, 1e-5)  # rtol, atol
    chainable: bool = True
    indexed: bool = False


def flatten(result: TorchOut) -> list[torch.Tensor]:
    """A torch result as a list of tensors."""
    return [result] if isinstance(result, torch.Tensor) else list(result)


def mismatch(got: Sequence[np.ndarray], expected: Sequence[torch.Tensor], first_input: np.ndarray,
             tolerance: tuple[float, float], indexed: bool = False) -> str | None:
    """Why `got` differs from torch's `expected`, or None when it matches. indexed: outputs are
    (values, indices) along the last dim of `first_input`; indices are checked by gathering."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, torch gives {len(expected)}"
    rtol, atol = tolerance
    if indexed:
        values, indices = got
        gathered = np.take_along_axis(first_input, indices.astype(np.int64), axis=-1)
        if not np.array_equal(gathered, values):
            return "indices do not point at the values"
        got, expected = got[:1], expected[:1]
    for i, (actual, want) in enumerate(zip(got, expected, strict=True)):
        want = want.numpy()
        if actual.shape != want.shape:
            return f"output {i} has shape {actual.shape}, torch gives {want.shape}"
        if not np.allclose(actual, want, rtol=rtol, atol=atol, equal_nan=True):
            error = np.nanmax(np.abs(actual.astype(np.float64) - want))
            return f"output {i} differs from torch by up to {error:.3g}"
    return None


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
          kind=ELEMENTWISE),
    _case("leaky_relu", lambda x: F.leaky_relu(x, SLOPE),
          lambda i, o: torch.ops.aten.leaky_relu.out(i[0], SLOPE, out=o[0]),
          ms_aten="leaky_relu", constants=_fixed(negative_slope=SLOPE),
          sizes=_unary(True, SMALL_2D, LARGE_2D),
          kind=ELEMENTWISE),
    _case("gelu", F.gelu, lambda i, o: torch.ops.aten.gelu.out(i[0], out=o[0]),
          ms_aten="gelu", constants=_fixed(), sizes=_unary(False, SMALL_2D, LARGE_2D),
          kind=ELEMENTWISE),
    _case("softmax", lambda x: torch.softmax(x, -1),
          lambda i, o: torch.ops.aten.softmax.int_out(i[0], -1, out=o[0]),
          ms_aten="softmax.int", constants=_fixed(dim=-1), sizes=_unary(False, SMALL_2D, LARGE_2D),
          kind=REDUCTION),
    OpCase("layer_norm", ms_aten="layer_norm", constants=_last_dim_shape,
           sizes=_layer_norm_sizes(), reference=_layer_norm_reference, aten_out=_layer_norm_out,
           kind=REDUCTION, tolerance=(1e-4, 1e-4)),
    _case("sum", lambda x: torch.sum(x, [1]),
          lambda i, o: torch.ops.aten.sum.IntList_out(i[0], [1], out=o[0]),
          ms_aten="sum.dim_IntList", constants=_fixed(dim=[1]),
          sizes=_unary(False, SMALL_2D, LARGE_2D),
          kind=REDUCTION, tolerance=(1e-4, 1e-3), chainable=False),
    _case("cumsum", lambda x: torch.cumsum(x, 1),
          lambda i, o: torch.ops.aten.cumsum.out(i[0], 1, out=o[0]),
          ms_aten="cumsum", constants=_fixed(dim=1), sizes=_unary(False, SMALL_2D, LARGE_2D),
          kind=REDUCTION, tolerance=(1e-4, 1e-3)),
    _case("mm", torch.mm, lambda i, o: torch.ops.aten.mm.out(i[0], i[1], out=o[0]),
          ms_aten="mm", constants=_fixed(), sizes=_mm_sizes(),
          tolerance=(1e-4, 1e-4)),
    _case("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1),
          lambda i, o: torch.ops.aten.convolution.out(i[0], i[1], i[2], [1, 1], [1, 1], [1, 1],
                                                      False, [0, 0], 1, out=o[0]),
          ms_aten="conv2d", constants=_fixed(padding=[1, 1]), sizes=_conv_sizes(),
          tolerance=(1e-4, 1e-4)),
    _case("topk", lambda x: torch.topk(x, TOPK),
          lambda i, o: torch.ops.aten.topk.values(i[0], TOPK, values=o[0], indices=o[1]),
          ms_aten="topk", constants=_fixed(k=TOPK), sizes=_unary(False, SMALL_2D, LARGE_2D),
          chainable=False, indexed=True),
    _case("sort", torch.sort, lambda i, o: torch.ops.aten.sort.values(i[0], values=o[0],
                                                                      indices=o[1]),
          ms_aten="sort", constants=_fixed(), sizes=_unary(False, SMALL_2D, (1024, 4096)),
          indexed=True),
    _case("index_select", lambda x, index: torch.index_select(x, 0, index),
          lambda i, o: torch.ops.aten.index_select.out(i[0], 0, i[1], out=o[0]),
          ms_aten="index_select", constants=_fixed(dim=0), sizes=_index_select_sizes()),
    _case("embedding", lambda weight, indices: F.embedding(indices, weight),
          lambda i, o: torch.ops.aten.embedding.out(i[0], i[1], out=o[0]),
          ms_aten="embedding", constants=_fixed(), sizes=_embedding_sizes()),
    # Its output size depends on the mask: GRAPH mode pads it (ms_aten/ops/bounded.py).
    _case("masked_select", torch.masked_select,
          lambda i, o: torch.ops.aten.masked_select.out(i[0], i[1], out=o[0]),
          ms_aten="masked_select", constants=_fixed(), sizes=_masked_select_sizes(),
          chainable=False),
)


def by_name(names: Sequence[str]) -> list[OpCase]:
    """The cases called `names`, in that order."""
    table = {case.name: case for case in CASES}
    return [table[name] for name in names]
