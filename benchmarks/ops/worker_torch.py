"""The op benchmark's baseline, ATen's out= calls, timed in a process that never imports
MindSpore (it checks). ops/run.py starts it; it prints one RESULT line of JSON: the median µs per
call of every baseline the plan needs, by key (plan.Plan.baselines).

    .venv/bin/python -m benchmarks.ops.worker_torch [--quick] [--ops relu,mm]

Each baseline is checked against torch's functional op first; the calls of one thread count are
timed round-robin (timing.measure) under torch.inference_mode.
"""
from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import torch

from benchmarks.common.timing import measure, no_sync
from benchmarks.common.workers import emit
from benchmarks.ops.cases import by_name, flatten, mismatch
from benchmarks.ops.plan import SEED, plan_from_command_line


def checked_call(op: str, size: str) -> Callable[[], object]:
    """ATen's out= call on the benchmark's data for (op, size), checked against torch."""
    case = by_name([op])[0]
    arrays = case.sizes[size](np.random.default_rng(SEED))
    inputs = [torch.from_numpy(a) for a in arrays]
    with torch.inference_mode():
        expected = flatten(case.reference(*inputs))
        call = case.aten_out(inputs)
        got = [t.numpy() for t in flatten(call())[:len(expected)]]
    problem = mismatch(got, expected, arrays[0], case.tolerance, case.indexed)
    if problem:
        raise AssertionError(f"ATen out= baseline of {op} ({size}) is wrong: {problem}")
    return call


def main() -> None:
    plan = plan_from_command_line(__doc__.splitlines()[0])
    default = torch.get_num_threads()
    wanted = plan.baselines()
    medians: dict[str, float] = {}
    for threads in sorted({w[2] for w in wanted.values()}):
        torch.set_num_threads(threads or default)
        for size in sorted({w[1] for w in wanted.values()}):
            keys = [k for k, w in wanted.items() if w[1:] == (size, threads)]
            calls = {k: (checked_call(wanted[k][0], size), no_sync) for k in keys}
            with torch.inference_mode():
                timings = measure(calls, plan.config(size))
            medians.update({k: t.median_us for k, t in timings.items()})
    torch.set_num_threads(default)
    if "mindspore" in sys.modules:
        raise SystemExit("the torch worker imported MindSpore: its timings are void")
    emit({"default_threads": default, "baselines": medians})


if __name__ == "__main__":
    main()
