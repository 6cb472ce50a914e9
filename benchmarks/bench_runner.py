"""Running the benchmark: for one (op, size), ATen's out= call as the baseline, then every route
checked against torch and, only if it is right, timed on the same data; plus the per-op-in-graph
chains. A route that fails is "n/a" with MindSpore's reason, a wrong one is "wrong"."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import mindspore as ms
import numpy as np
import torch

from bench_ops import Arrays, OpCase, flatten
from bench_routes import (GRAPH, MODES, MS_ATEN, NATIVE, Route, build, chain_route,
                          ms_aten_route, mismatch, native_routes, pyfunc_route, reason,
                          seed_aot_route, to_numpy)
from bench_timing import TimingConfig, measure, ms_sync, no_sync

OK, WRONG, NA = "ok", "wrong", "n/a"
CHAIN_TOLERANCE = (1e-3, 1e-3)  # rounding differences compound along a chain


@dataclass
class RouteResult:
    family: str
    impl: str
    mode: str
    status: str
    median_us: float | None = None  # per call (per op, for a chain)
    min_us: float | None = None
    ratio: float | None = None  # median_us / ATen out= median_us
    inner: int | None = None
    note: str = ""


@dataclass
class CaseResult:
    op: str
    size: str
    shapes: list[list[int]]
    torch_threads: int
    aten_out_us: float
    routes: list[RouteResult] = field(default_factory=list)
    chain_length: int | None = None  # set for per-op-in-graph chains: routes hold µs per op


@dataclass(frozen=True)
class Prepared:
    """One (op, size): the data as numpy, torch and MindSpore tensors, and torch's result."""

    arrays: Arrays
    torch_inputs: list[torch.Tensor]
    ms_inputs: list[ms.Tensor]
    expected: list[torch.Tensor]


def prepare(case: OpCase, size: str, seed: int) -> Prepared:
    arrays = case.sizes[size](np.random.default_rng(seed))
    torch_inputs = [torch.from_numpy(a) for a in arrays]
    with torch.inference_mode():
        expected = flatten(case.reference(*torch_inputs))
    return Prepared(arrays, torch_inputs, [ms.Tensor(a) for a in arrays], expected)


def time_aten_out(case: OpCase, data: Prepared, config: TimingConfig) -> float:
    """ATen out= µs: the baseline every route is a ratio to (checked against torch first)."""
    with torch.inference_mode():
        call = case.aten_out(data.torch_inputs)
        got = [t.numpy() for t in flatten(call())[:len(data.expected)]]
        problem = mismatch(got, data.expected, data.arrays[0], case.tolerance, case.indexed)
        if problem:
            raise AssertionError(f"ATen out= baseline of {case.name} is wrong: {problem}")
        return measure(call, no_sync, config).median_us


def run_route(route: Route, data: Prepared, check: Callable[[list[np.ndarray]], str | None],
              config: TimingConfig, baseline_us: float, per: int = 1) -> RouteResult:
    """Check `route`'s result with `check`, then time it; `per` divides the time (chains)."""
    def result(status: str, note: str = "") -> RouteResult:
        return RouteResult(route.family, route.impl, route.mode, status, note=note)

    try:
        fn = build(route)
        output = fn(*data.ms_inputs)
        ms_sync()
        problem = check(to_numpy(output))
        if problem:
            return result(WRONG, problem)
        timing = measure(lambda: fn(*data.ms_inputs), ms_sync, config)
    except Exception as error:  # noqa: BLE001 - any failure of a route is reported, not fatal
        return result(NA, reason(error))
    median, best = timing.median_us / per, timing.min_us / per
    return RouteResult(route.family, route.impl, route.mode, OK, median, best,
                       median / baseline_us, timing.inner)


def routes_for(case: OpCase, data: Prepared, seed_aot: Path | None) -> list[Route]:
    routes = []
    for mode in MODES:
        routes.append(ms_aten_route(case, data.arrays, mode))
        routes.extend(native_routes(case, mode))
        routes.append(pyfunc_route(case, data.expected, mode))
        if case.name == "leaky_relu" and seed_aot is not None:
            routes.append(seed_aot_route(seed_aot, mode))
    return routes


def run_case(case: OpCase, size: str, config: TimingConfig, seed: int,
             seed_aot: Path | None = None,
             select: Callable[[Route], bool] = lambda route: True) -> CaseResult:
    """Every selected route of `case` at `size`, against ATen out= on the same data."""
    data = prepare(case, size, seed)
    baseline = time_aten_out(case, data, config)
    result = CaseResult(case.name, size, [list(a.shape) for a in data.arrays],
                        torch.get_num_threads(), baseline)

    def check(got: list[np.ndarray]) -> str | None:
        return mismatch(got, data.expected, data.arrays[0], case.tolerance, case.indexed)

    for route in filter(select, routes_for(case, data, seed_aot)):
        result.routes.append(run_route(route, data, check, config, baseline))
    return result


def chain_reference(case: OpCase, data: Prepared, length: int) -> list[torch.Tensor]:
    x, rest = data.torch_inputs[0], data.torch_inputs[1:]
    with torch.inference_mode():
        for _ in range(length):
            x = flatten(case.reference(x, *rest))[0]
    return [x]


def run_chain(case: OpCase, size: str, config: TimingConfig, seed: int,
              length: int) -> CaseResult:
    """Per-op time inside one graph: `length` chained calls of ms_aten vs of each native."""
    data = prepare(case, size, seed)
    baseline = time_aten_out(case, data, config)
    expected = chain_reference(case, data, length)
    result = CaseResult(case.name, size, [list(a.shape) for a in data.arrays],
                        torch.get_num_threads(), baseline, chain_length=length)

    def check(got: list[np.ndarray]) -> str | None:
        return mismatch(got, expected, data.arrays[0], CHAIN_TOLERANCE)

    singles = [ms_aten_route(case, data.arrays, GRAPH), *native_routes(case, GRAPH)]
    for route in singles:
        chained = chain_route(route, length, pick_first=len(data.expected) > 1)
        result.routes.append(run_route(chained, data, check, config, baseline, per=length))
    return result


def is_family(*families: str) -> Callable[[Route], bool]:
    return lambda route: route.family in families


def in_mode(mode: str, *families: str) -> Callable[[Route], bool]:
    return lambda route: route.mode == mode and route.family in families

