"""Timing: warm up, then the median of repeated samples, taken round-robin over the compared calls.

One sample is `inner` back-to-back calls followed by one sync point, divided by `inner`;
`inner` is doubled until a sample lasts at least `target_s`. MindSpore's PyNative mode launches
CPU ops asynchronously (a call of ops.ReLU on 16M elements returns in ~10 us), so every
MindSpore sample ends with MindSpore's executor sync, which waits for all launched ops; no
output is copied out with .asnumpy(). GRAPH-mode Cell calls on CPU already return finished
results, and the sync then costs ~2 us. A lone PyNative call + sync costs several ms on a busy
2-core machine (the hand-off to MindSpore's backend thread waits for a CPU), so the numbers are
steady-state costs per call in a loop, the sync amortized over many calls, which is what a
model pays.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)


def ms_sync() -> None:
    """Wait until every op MindSpore launched has finished (re-raises a failed launch).

    mindspore.runtime.synchronize() refuses the CPU device, so this is the executor's sync. It
    is imported here, not at the top: the torch eager workers time with this module and never
    import MindSpore.
    """
    from mindspore.graph.api import _pynative_executor

    _pynative_executor.sync()


def no_sync() -> None:
    """torch eager CPU ops are synchronous."""


@dataclass(frozen=True)
class TimingConfig:
    warmup: int
    repeats: int
    target_s: float
    max_inner: int = 4096
    slow_s: float = 1.0
    slow_repeats: int = 3


@dataclass(frozen=True)
class Timing:
    median_us: float
    min_us: float
    inner: int
    repeats: int


def _time_loop(call: Callable[[], object], sync: Callable[[], None], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        call()
    sync()
    return time.perf_counter() - start


def calibrate(call: Callable[[], object], sync: Callable[[], None], config: TimingConfig) -> int:
    """Calls per sample: doubled until `inner` calls plus one sync last config.target_s (the
    faster of two tries, so that one stall of a busy machine does not stop it early)."""
    inner = 1
    while inner < config.max_inner:
        if min(_time_loop(call, sync, inner) for _ in range(2)) >= config.target_s:
            break
        inner *= 2
    return min(inner, config.max_inner)


def measure(calls: dict[Key, tuple[Callable[[], object], Callable[[], None]]],
            config: TimingConfig) -> dict[Key, Timing]:
    """Median per-call time of each (call, sync) in `calls`, sampled round-robin so that a
    drift in the machine's load hits every call alike (see the module docstring). A call
    slower than config.slow_s is sampled one call at a time, config.slow_repeats times."""
    inner, rounds = {}, {}
    for key, (call, sync) in calls.items():
        if _time_loop(call, sync, 1) >= config.slow_s:
            inner[key], rounds[key] = 1, min(config.repeats, config.slow_repeats)
            continue
        for _ in range(config.warmup - 1):
            call()
        sync()
        inner[key], rounds[key] = calibrate(call, sync, config), config.repeats
    samples: dict[Key, list[float]] = {key: [] for key in calls}
    for round_ in range(config.repeats):
        for key, (call, sync) in calls.items():
            if round_ >= rounds[key]:
                continue
            samples[key].append(_time_loop(call, sync, inner[key]) / inner[key])
    return {key: Timing(statistics.median(values) * 1e6, min(values) * 1e6, inner[key],
                        len(values))
            for key, values in samples.items()}
