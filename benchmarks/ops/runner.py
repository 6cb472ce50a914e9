"""Running the MindSpore side of the op benchmark: for one (op, size), every route checked against
torch and, only if it is right, timed on the same data; plus the per-op-in-graph chains. A route
that fails is "n/a" with MindSpore's reason, a wrong one is "wrong". ATen's out= baseline is
timed apart, in processes without MindSpore (ops/worker_torch.py); ops/run.py brings both
together."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mindspore as ms
import numpy as np
import torch

from benchmarks.common.timing import TimingConfig, measure, ms_sync
from benchmarks.ops.cases import Arrays, OpCase, flatten, mismatch
from benchmarks.ops.results import EMPTY_AOT, GRAPH, NA, OK, WRONG, CaseResult, RouteResult
from benchmarks.ops.routes import (
    MODES,
    Route,
    build,
    chain_route,
    empty_aot_route,
    ms_aten_route,
    native_routes,
    pyfunc_route,
    reason,
    seed_aot_route,
    to_numpy,
)

CHAIN_TOLERANCE = (1e-3, 1e-3)  # rounding differences compound along a chain
Check = Callable[[list[np.ndarray]], "str | None"]  # why outputs are wrong, or None


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


def run_routes(routes: list[Route], data: Prepared, check: Check, config: TimingConfig,
               per: int) -> list[RouteResult]:
    """Check every route, then time the right ones round-robin, mode by mode; `per` divides
    route times (chains)."""
    results = []
    for mode in MODES:
        runnable = {}
        for route in (r for r in routes if r.mode == mode):
            fn, result = try_route(route, data, check)
            results.append(result)
            if fn is not None:
                runnable[len(results) - 1] = fn
        if not runnable:
            continue
        timings = measure({i: (lambda fn=fn: fn(*data.ms_inputs), ms_sync)
                           for i, fn in runnable.items()}, config)
        for i, timing in timings.items():
            result = results[i]
            result.median_us, result.min_us = timing.median_us / per, timing.min_us / per
            result.inner, result.samples = timing.inner, timing.repeats
    return results


@dataclass(frozen=True)
class Kernels:
    """The compiled AOT kernels some routes need (benchmarks/.cache), where available."""

    seed_aot: Path | None = None  # csrc/examples/leaky_relu.cpp: leaky_relu only
    empty_aot: Path | None = None  # benchmarks/ops/empty_kernel.cpp


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


def new_result(case: OpCase, size: str, data: Prepared, routes: list[RouteResult], threads: int,
               chain_length: int | None = None) -> CaseResult:
    """The case's routes; its ATen out= baseline comes from the torch workers (ops/run.py)."""
    return CaseResult(case.name, size, [list(a.shape) for a in data.arrays], threads,
                      float("nan"), routes, chain_length)


def run_case(case: OpCase, size: str, config: TimingConfig, seed: int,
             kernels: Kernels = Kernels(),
             select: Callable[[Route], bool] = lambda route: True, threads: int = 0) -> CaseResult:
    """Every selected route of `case` at `size`, checked against torch on the same data;
    `threads`: the ATen threads set for it (0: ATen's default)."""
    data = prepare(case, size, seed)

    def check(got: list[np.ndarray]) -> str | None:
        return mismatch(got, data.expected, data.arrays[0], case.tolerance, case.indexed)

    routes = [route for route in routes_for(case, data, kernels) if select(route)]
    return new_result(case, size, data, run_routes(routes, data, check, config, per=1), threads)


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
    expected = chain_reference(case, data, length)

    def check(got: list[np.ndarray]) -> str | None:
        return mismatch(got, expected, data.arrays[0], CHAIN_TOLERANCE)

    singles = [ms_aten_route(case, data.arrays, GRAPH), *native_routes(case, GRAPH),
               *hand_written_routes(case, kernels, GRAPH)]
    # Output 0 of a multi-output op feeds the next call; the empty kernel has one output.
    chains = [chain_route(route, length, len(data.expected) > 1 and route.family != EMPTY_AOT)
              for route in singles]
    return new_result(case, size, data, run_routes(chains, data, check, config, per=length), 0,
                      length)


def is_family(*families: str) -> Callable[[Route], bool]:
    return lambda route: route.family in families


def in_mode(mode: str, *families: str) -> Callable[[Route], bool]:
    return lambda route: route.mode == mode and route.family in families

