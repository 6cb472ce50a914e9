"""A small model's fixed costs per call: ms_aten's own Python work (the change check, the call
path) in the main thread's CPU time, which other processes' load inflates far less than wall
time, and each route's wall time and launches per call. One process per run; for an A/B, run
it alternately in two checkouts (`-m` from each one's root: run by its path, this folder's
profile.py would shadow Python's), in fresh processes.

    .venv/bin/python -m benchmarks.models.fixed_costs            # GPT-2 tiny, every route
    .venv/bin/python -m benchmarks.models.fixed_costs --model gpt2-small --threads 0 \
        --routes check "PYNATIVE forward"

Routes (models/workloads.py's model and data, ms_aten.set_num_threads(--threads)):
- check: the change check of a call from Python (runtime/changes.follow) with nothing changed,
  main-thread CPU time;
- "PYNATIVE forward": `cell(x)`, main-thread CPU time and wall;
- "GRAPH forward", "GRAPH forward+backward" (jitted value_and_grad of a MindSpore loss Cell),
  "GRAPH step <optimizer>" and "PYNATIVE step <optimizer>" (nn.Adam, ms_aten.optim.Adam):
  wall per call and launches per call.
Each figure is the median of --blocks blocks of calls, after warm-up calls. Prints one JSON
line.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import mindspore as ms
from mindspore import nn

import ms_aten
from benchmarks.common.timing import ms_sync
from benchmarks.models.workloads import CONFIGS
from ms_aten import to_ms
from ms_aten.programs.runtime.changes import follow

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from loss_cell import LossCell  # noqa: E402  (tests/loss_cell.py)

ROUTES = ("check", "PYNATIVE forward", "GRAPH forward", "GRAPH forward+backward",
          "GRAPH step nn.Adam", "GRAPH step ms_aten.optim.Adam", "PYNATIVE forward+backward",
          "PYNATIVE step nn.Adam", "PYNATIVE step ms_aten.optim.Adam")


def blocks(call: Callable[[], object], clock: Callable[[], int], calls: int, n: int) -> float:
    """The median over n blocks of `calls` calls of clock's time per call, in µs."""
    times = []
    for _ in range(n):
        start = clock()
        for _ in range(calls):
            call()
        times.append((clock() - start) / calls / 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2-tiny", choices=list(CONFIGS))
    parser.add_argument("--routes", nargs="*", default=list(ROUTES), choices=ROUTES)
    parser.add_argument("--threads", type=int, default=1, help="ATen threads (0: default)")
    parser.add_argument("--calls", type=int, default=50, help="calls per block")
    parser.add_argument("--blocks", type=int, default=9)
    args = parser.parse_args()
    ms.set_device("CPU")
    if args.threads:
        ms_aten.set_num_threads(args.threads)
    c = CONFIGS[args.model]()
    cell = ms_aten.module(c.module, c.inputs)
    x, target = to_ms(c.inputs[0]), to_ms(c.target)
    params = cell.trainable_params()
    result: dict = {"model": args.model, "ms_aten": str(Path(ms_aten.__file__).parent.parent),
                    "threads": args.threads, "routes": {}}

    def step_of(optimizer: str, jit: bool) -> Callable[[], object]:
        grad_fn = ms.value_and_grad(LossCell(cell, c.loss), None, params)
        opt = nn.Adam(params, learning_rate=1e-4) if optimizer == "nn.Adam" else \
            ms_aten.optim.Adam(params, lr=1e-4)

        def step(a, b):
            loss, grads = grad_fn(a, b)
            opt(grads)
            return loss
        run = ms.jit(step) if jit else step
        return lambda: run(x, target)

    for route in args.routes:
        ms.set_context(mode=ms.PYNATIVE_MODE if route.startswith("PYNATIVE") or route == "check"
                       else ms.GRAPH_MODE)
        if route == "check":
            ms_sync()
            result["routes"][route] = {"cpu_us": blocks(lambda: follow(cell), time.thread_time_ns,
                                                        20 * args.calls, args.blocks)}
            continue
        if route.endswith("forward"):
            run: Callable[[], object] = lambda: cell(x)  # noqa: E731
        elif route.endswith("forward+backward"):
            grad_fn = ms.value_and_grad(LossCell(cell, c.loss), None, params)
            call = ms.jit(grad_fn) if route.startswith("GRAPH") else grad_fn
            run = lambda call=call: call(x, target)  # noqa: E731
        else:
            run = step_of(route.split(" step ")[1], route.startswith("GRAPH"))

        def synced(run=run) -> None:
            run()
            ms_sync()
        for _ in range(10):
            synced()
        before = ms_aten.launch_count()
        wall = blocks(synced, time.perf_counter_ns, args.calls, args.blocks)
        launches = (ms_aten.launch_count() - before) / (args.calls * args.blocks)
        cpu = blocks(synced, time.thread_time_ns, args.calls, args.blocks)
        result["routes"][route] = {"wall_us": wall, "cpu_us": cpu, "launches": launches}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
