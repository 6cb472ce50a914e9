"""Running the benchmark: for one (op, size), ATen's out= call as the baseline, then every route
checked against torch and, only if it is right, timed on the same data; plus the per-op-in-graph
chains. A route that fails is "n/a" with MindSpore's reason, a wrong one is "wrong"."""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import mindspore as ms
import numpy as np
import torch
from bench_ops import Arrays, OpCase, flatten
from bench_routes import (
    EMPTY_AOT,
    GRAPH,
    MODES,
    Route,
    build,
    chain_route,
    empty_aot_route,
    mismatch,
    ms_aten_route,
    native_routes,
    pyfunc_route,
    reason,
    seed_aot_route,
    to_numpy,
)
from bench_timing import Timing, TimingConfig, measure, ms_sync, no_sync

OK, WRONG, NA = "ok", "wrong", "n/a"
CHAIN_TOLERANCE = (1e-3, 1e-3)  # rounding differences compound along a chain
BASELINE = "ATen out="
Check = Callable[[list[np.ndarray]], "str | None"]  # why outputs are wrong, or None


@dataclass
class RouteResult:
    family: str
    impl: str
    mode: str
    status: str
    median_us: float | None = None  # per call (per op, for a chain)
    min_us: float | None = None
    ratio: float | None = None  # median_us / ATen out= median_us
    inner: int | None = None  # calls per sample
    samples: int | None = None
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


def aten_out_call(case: OpCase, data: Prepared) -> Callable[[], object]:
    """ATen's out= call on the data, checked against torch: the baseline of every ratio."""
    with torch.inference_mode():
        call = case.aten_out(data.torch_inputs)
        got = [t.numpy() for t in flatten(call())[:len(data.expected)]]
    problem = mismatch(got, data.expected, data.arrays[0], case.tolerance, case.indexed)
    if problem:
        raise AssertionError(f"ATen out= baseline of {case.name} is wrong: {problem}")
    return call


def try_route(route: Route, data: Prepared, check: Check) -> tuple[Callable | None, RouteResult]:
    """Build `route` and check its result: (its callable, a pending result) if it is right,
    else (None, its n/a or wrong result)."""
    result = RouteResult(route.family, route.impl, route.mode, OK)
    try:
        fn = build(route)
        output = fn(*data.ms_inputs)
        ms_sync()
        problem = check(to_numpy(output)) if route.checked else None
    except Exception as error:  # noqa: BLE001 - a failing route is reported, not fatal
        result.status, result.note = NA, reason(error)
        return None, result
    if problem:
        result.status, result.note = WRONG, problem
        return None, result
    if not route.checked:
        result.note = "not checked: the kernel computes nothing"
    return fn, result


def run_routes(routes: list[Route], data: Prepared, baseline: Callable[[], object],
               check: Check, config: TimingConfig,
               per: int) -> tuple[list[RouteResult], list[Timing]]:
    """Check every route, then time the right ones round-robin with the baseline, mode by
    mode; `per` divides route times (chains). Returns the results and the baseline timings."""
    results, baselines = [], []
    for mode in MODES:
        runnable = {}
        for route in (r for r in routes if r.mode == mode):
            fn, result = try_route(route, data, check)
            results.append(result)
            if fn is not None:
                runnable[len(results) - 1] = fn
        if not runnable:
            continue
        calls = {BASELINE: (baseline, no_sync)}
        calls.update({i: (lambda fn=fn: fn(*data.ms_inputs), ms_sync)
                      for i, fn in runnable.items()})
        with torch.inference_mode():
            timings = measure(calls, config)
        baselines.append(timings.pop(BASELINE))
        for i, timing in timings.items():
            result = results[i]
            result.median_us, result.min_us = timing.median_us / per, timing.min_us / per
            result.inner, result.samples = timing.inner, timing.repeats
    if not baselines:  # no route runs: the baseline alone
        with torch.inference_mode():
            baselines.append(measure({BASELINE: (baseline, no_sync)}, config)[BASELINE])
    return results, baselines


def finish(result: CaseResult, routes: list[RouteResult], baselines: list[Timing]) -> CaseResult:
    """Fill in the baseline (median over the mode groups) and every route's ratio to it."""
    result.aten_out_us = statistics.median(t.median_us for t in baselines)
    for route in routes:
        if route.status == OK:
            route.ratio = route.median_us / result.aten_out_us
    result.routes = routes
    return result


@dataclass(frozen=True)
class Kernels:
    """The compiled AOT kernels some routes need (benchmarks/.cache), where available."""

    seed_aot: Path | None = None  # csrc/examples/leaky_relu.cpp: leaky_relu only
    empty_aot: Path | None = None  # benchmarks/empty_kernel.cpp


def hand_written_routes(case: OpCase, kernels: Kernels, mode: str) -> list[Route]:
    """The seed kernel (leaky_relu) and the empty kernel (one-input ops), where built."""
    routes = []
    if case.name == "leaky_relu" and kernels.seed_aot is not None:
        routes.append(seed_aot_route(kernels.seed_aot, mode))
    if case.chainable and kernels.empty_aot is not None:
        routes.append(empty_aot_route(kernels.empty_aot, mode))
    return routes


def routes_for(case: OpCase, data: Prepared, kernels: Kernels) -> list[Route]:
    routes = []
    for mode in MODES:
        routes.append(ms_aten_route(case, data.arrays, mode))
        routes.extend(native_routes(case, mode))
        routes.append(pyfunc_route(case, data.expected, len(data.arrays), mode))
        routes.extend(hand_written_routes(case, kernels, mode))
    return routes


def new_result(case: OpCase, size: str, data: Prepared,
               chain_length: int | None = None) -> CaseResult:
    return CaseResult(case.name, size, [list(a.shape) for a in data.arrays],
                      torch.get_num_threads(), float("nan"), chain_length=chain_length)


def run_case(case: OpCase, size: str, config: TimingConfig, seed: int,
             kernels: Kernels = Kernels(),
             select: Callable[[Route], bool] = lambda route: True) -> CaseResult:
    """Every selected route of `case` at `size`, against ATen out= on the same data."""
    data = prepare(case, size, seed)
    baseline = aten_out_call(case, data)

    def check(got: list[np.ndarray]) -> str | None:
        return mismatch(got, data.expected, data.arrays[0], case.tolerance, case.indexed)

    routes = [route for route in routes_for(case, data, kernels) if select(route)]
    results, baselines = run_routes(routes, data, baseline, check, config, per=1)
    return finish(new_result(case, size, data), results, baselines)


def chain_reference(case: OpCase, data: Prepared, length: int) -> list[torch.Tensor]:
    x, rest = data.torch_inputs[0], data.torch_inputs[1:]
    with torch.inference_mode():
        for _ in range(length):
            x = flatten(case.reference(x, *rest))[0]
    return [x]


def run_chain(case: OpCase, size: str, config: TimingConfig, seed: int, length: int,
              kernels: Kernels = Kernels()) -> CaseResult:
    """Per-op time inside one graph: `length` chained calls of ms_aten vs of each native, and
    of the hand-written and the empty AOT kernels."""
    data = prepare(case, size, seed)
    baseline = aten_out_call(case, data)
    expected = chain_reference(case, data, length)

    def check(got: list[np.ndarray]) -> str | None:
        return mismatch(got, expected, data.arrays[0], CHAIN_TOLERANCE)

    singles = [ms_aten_route(case, data.arrays, GRAPH), *native_routes(case, GRAPH),
               *hand_written_routes(case, kernels, GRAPH)]
    # Output 0 of a multi-output op feeds the next call; the empty kernel has one output.
    chains = [chain_route(route, length, len(data.expected) > 1 and route.family != EMPTY_AOT)
              for route in singles]
    routes, baselines = run_routes(chains, data, baseline, check, config, per=length)
    return finish(new_result(case, size, data, length), routes, baselines)


def is_family(*families: str) -> Callable[[Route], bool]:
    return lambda route: route.family in families


def in_mode(mode: str, *families: str) -> Callable[[Route], bool]:
    return lambda route: route.mode == mode and route.family in families

