"""The ways to run one op from MindSpore, each in GRAPH mode (inside an nn.Cell compiled once)
or PYNATIVE mode (a plain call): ms_aten, the native ops, a pyfunc Custom calling torch through
numpy, the seed-style hand-written AOT kernel, and an empty AOT kernel (MindSpore's own cost of
launching any Custom op)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mindspore as ms
import numpy as np
import torch
from mindspore import nn, ops

import ms_aten
from benchmarks.ops.cases import Arrays, OpCase, flatten
from benchmarks.ops.natives import NATIVES
from benchmarks.ops.results import EMPTY_AOT, GRAPH, MS_ATEN, NATIVE, PYFUNC, PYNATIVE, SEED_AOT

MODES = {GRAPH: ms.GRAPH_MODE, PYNATIVE: ms.PYNATIVE_MODE}
MS_DTYPES = {torch.float32: ms.float32, torch.int64: ms.int64}  # the benchmarks' output dtypes


class Apply(nn.Cell):
    """One call of `fn` on the call-time tensors, compiled as a graph."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def construct(self, *xs):
        return self.fn(*xs)


class First(nn.Cell):
    """Output 0 of a multi-output `fn`."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def construct(self, *xs):
        return self.fn(*xs)[0]


class Chain(nn.Cell):
    """`length` calls of `fn` in one graph, each output fed back as the next input 0."""

    def __init__(self, fn: Callable, length: int):
        super().__init__()
        self.fn = fn
        self.length = length

    def construct(self, x, *rest):
        for _ in range(self.length):
            x = self.fn(x, *rest)
        return x


@dataclass(frozen=True)
class Route:
    """What runs (family and impl), in which mode, and how to build it once the mode is set."""

    family: str
    impl: str
    mode: str
    make: Callable[[], Callable]
    checked: bool = True  # False: it computes nothing to check (the empty kernel)


def set_mode(mode: str) -> None:
    ms.set_context(mode=MODES[mode], device_target="CPU")


def build(route: Route) -> Callable:
    """The callable for `route`: an Apply Cell in GRAPH mode, the op itself in PYNATIVE."""
    set_mode(route.mode)
    fn = route.make()
    return Apply(fn) if route.mode == GRAPH else fn


def to_numpy(result: Any) -> list[np.ndarray]:
    if isinstance(result, (tuple, list)):
        return [item.asnumpy() for item in result]
    return [result.asnumpy()]


def reason(error: BaseException) -> str:
    """The informative line of a MindSpore error (its messages open with banner lines)."""
    for line in str(error).splitlines():
        line = line.strip()
        if line and not line.startswith("-"):
            line = line.split("Error message is ")[-1].split(", Please")[0]
            return f"{type(error).__name__}: {line}"[:200]
    return type(error).__name__


def ms_aten_route(case: OpCase, arrays: Arrays, mode: str) -> Route:
    constants = case.constants(arrays)
    shown = "".join(f", {key}={value}" for key, value in constants.items())
    return Route(MS_ATEN, f"ms_aten.op('{case.ms_aten}'{shown})", mode,
                 lambda: ms_aten.op(case.ms_aten, **constants))


def native_routes(case: OpCase, mode: str) -> list[Route]:
    return [Route(NATIVE, native.label, mode, lambda fn=native.fn: fn)
            for native in NATIVES[case.name]]


def _with_arity(fn: Callable, n_inputs: int) -> Callable:
    """`fn(*arrays)` with exactly `n_inputs` named parameters: a pyfunc Custom counts its
    inputs from the signature and rejects *args as a tuple input."""
    fixed = {1: lambda a: fn(a), 2: lambda a, b: fn(a, b), 3: lambda a, b, c: fn(a, b, c)}
    return fixed[n_inputs]


def pyfunc_route(case: OpCase, expected: Sequence[torch.Tensor], n_inputs: int,
                 mode: str) -> Route:
    shapes = [list(t.shape) for t in expected]
    dtypes = [MS_DTYPES[t.dtype] for t in expected]
    single = len(expected) == 1

    def body(*arrays: np.ndarray):
        with torch.inference_mode():
            results = flatten(case.reference(*map(torch.from_numpy, arrays)))
        outputs = tuple(t.numpy() for t in results)
        return outputs[0] if single else outputs

    def make() -> ops.Custom:
        out_shape = (lambda *_: shapes[0]) if single else (lambda *_: tuple(shapes))
        out_dtype = (lambda *_: dtypes[0]) if single else (lambda *_: tuple(dtypes))
        return ops.Custom(_with_arity(body, n_inputs), out_shape=out_shape,
                          out_dtype=out_dtype, func_type="pyfunc")

    return Route(PYFUNC, "ops.Custom(pyfunc: numpy -> torch -> numpy)", mode, make)


def seed_aot_route(library: Path, mode: str) -> Route:
    def make() -> ops.Custom:
        return ops.Custom(f"{library}:LeakyRelu", out_shape=lambda x: x, out_dtype=lambda x: x,
                          func_type="aot")
    return Route(SEED_AOT, f"ops.Custom('{library.name}:LeakyRelu', aot)", mode, make)


def empty_aot_route(library: Path, mode: str) -> Route:
    """A Custom op whose kernel returns at once, shaped like its first input."""
    def make() -> ops.Custom:
        return ops.Custom(f"{library}:Empty", out_shape=lambda x, *_: x,
                          out_dtype=lambda x, *_: x, func_type="aot")
    return Route(EMPTY_AOT, f"ops.Custom('{library.name}:Empty', aot)", mode, make,
                 checked=False)


def chain_route(route: Route, length: int, pick_first: bool) -> Route:
    """`route` repeated `length` times inside one graph."""
    def make() -> Chain:
        fn = route.make()
        return Chain(First(fn) if pick_first else fn, length)
    return Route(route.family, route.impl, GRAPH, make, route.checked)
