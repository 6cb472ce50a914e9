"""The op benchmark's results, without torch or MindSpore: route families and modes, what one
route and one (op, size) gave, and the merging of several processes' results into one figure.

ops/run.py (the orchestrator, which imports neither framework) merges and reports them; the
workers (ops/worker_ms_aten.py, ops/worker_torch.py) produce them.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

GRAPH, PYNATIVE = "graph", "pynative"
MS_ATEN, NATIVE, PYFUNC, SEED_AOT = "ms_aten", "native", "pyfunc", "seed_aot"
EMPTY_AOT = "empty_aot"
OK, WRONG, NA = "ok", "wrong", "n/a"


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
    per_process_us: list[float] = field(default_factory=list)


@dataclass
class CaseResult:
    op: str
    size: str
    shapes: list[list[int]]
    torch_threads: int  # ATen threads set for this case, on both sides (0: ATen's default)
    aten_out_us: float  # the baseline, from the torch workers (nan until merged)
    routes: list[RouteResult] = field(default_factory=list)
    chain_length: int | None = None  # set for per-op-in-graph chains: routes hold µs per op
    aten_out_per_process_us: list[float] = field(default_factory=list)

    @property
    def baseline_key(self) -> str:
        """The key of its ATen out= baseline in a torch worker's results."""
        return baseline_key(self.op, self.size, self.torch_threads)


def baseline_key(op: str, size: str, threads: int) -> str:
    return f"{op}/{size}/{threads} threads"


def case_from_dict(data: dict) -> CaseResult:
    routes = [RouteResult(**route) for route in data.pop("routes")]
    return CaseResult(**data, routes=routes)


def merge(runs: list[CaseResult], baselines: list[dict[str, float]]) -> CaseResult:
    """One (op, size) measured in several MindSpore processes, and its ATen out= baseline in
    several torch processes: each figure the median over processes, the ratios between those
    medians. A route that failed or was wrong in any process keeps that status."""
    first = runs[0]
    per_process = [b[first.baseline_key] for b in baselines]
    merged = CaseResult(first.op, first.size, first.shapes, first.torch_threads,
                        statistics.median(per_process), chain_length=first.chain_length,
                        aten_out_per_process_us=per_process)
    for i, route in enumerate(first.routes):
        same = [run.routes[i] for run in runs]
        bad = next((r for r in same if r.status != OK), None)
        if bad is not None:
            merged.routes.append(RouteResult(route.family, route.impl, route.mode, bad.status,
                                             note=bad.note))
            continue
        figures = [r.median_us for r in same if r.median_us is not None]
        median = statistics.median(figures)
        merged.routes.append(RouteResult(
            route.family, route.impl, route.mode, OK, median,
            min(r.min_us for r in same if r.min_us is not None), median / merged.aten_out_us,
            route.inner, sum(r.samples or 0 for r in same), route.note, figures))
    return merged
