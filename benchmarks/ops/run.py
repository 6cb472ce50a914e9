"""Benchmark ms_aten op by op against ATen eager out=, MindSpore's native CPU ops, a pyfunc
Custom calling torch through numpy, the seed-style hand-written AOT kernel and an empty AOT
kernel (MindSpore's own cost of a Custom op). Writes the run's summary and plots, ops/<cell>.json
and ops/<cell>.png, and rewrites the report, ops/README.md.

    .venv/bin/python -m benchmarks.ops.run                # full run: 3 rounds, about 45 minutes
    .venv/bin/python -m benchmarks.ops.run --quick        # CI smoke: 3 ops, small inputs, 1 round
    .venv/bin/python -m benchmarks.ops.run --out DIR --note "what else ran on the machine"
    .venv/bin/python -m benchmarks.ops.run --ops relu,leaky_relu --processes 5

This process only orchestrates (it imports neither torch nor MindSpore): each round runs the
MindSpore side (ops/worker_ms_aten.py: every route, the natives beside ms_aten in one process)
and ATen's out= baselines (ops/worker_torch.py, a process that never imports MindSpore) in
fresh processes, the order alternating; figures are medians over the rounds. A run is a cell
named for its ops (all_ops, or the --ops joined by "+"; quick for --quick), rewritten when those
ops are run again: the full run writes benchmarks/results/ops/all_ops.{json,png}, --quick
benchmarks/results/quick/ops/quick.{json,png} (--out DIR: DIR/ops/).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

from benchmarks.common import workers
from benchmarks.ops.plan import ALL_OPS, QUICK, THREAD_COUNTS, plan_for
from benchmarks.ops.report import PARTS, Report, cell_name, write, write_markdown
from benchmarks.ops.results import case_from_dict, merge

WORKERS = {"torch": "benchmarks.ops.worker_torch", "ms_aten": "benchmarks.ops.worker_ms_aten"}

METHOD = """\
Method:
- Every route is first checked against torch (allclose; topk/sort indices by gathering); a
  route that fails or is wrong is listed as n/a or wrong and never timed.
- Processes: each of {processes} rounds runs the MindSpore side (every route, in one process)
  and the baseline (ATen's out= calls, in a process that never imports MindSpore: MindSpore's
  runtime threads slow torch down when they share a process) in fresh processes, the order
  alternating; each figure is the median over the rounds, each ratio a ratio of medians.
- Timing in a process: warm-up, then the median of {repeats} samples ({repeats_large} for large
  inputs), each K back-to-back calls plus one sync, divided by K; K is doubled until a sample
  lasts >= {target_ms:g} ms; a call slower than {slow_s:g} s is timed alone, {slow_repeats} times.
  Samples are taken round-robin over the routes of one mode, so that load drifts hit all alike.
- MindSpore's PYNATIVE mode launches CPU ops asynchronously: the sync is MindSpore's executor
  sync (no .asnumpy() copy), and PYNATIVE numbers are steady-state costs per call in a loop.
- Baseline: torch.ops.aten.<op>.out (for layer_norm and conv2d, the out= overload of their
  kernel: native_layer_norm.out, convolution.out) with preallocated outputs under
  torch.inference_mode, on the same data. Ratios are route time / baseline time.
- Threads: ATen's default on both sides; the thread study sets n threads on both sides
  (torch.set_num_threads for the baseline, ms_aten.set_num_threads for ms_aten's kernels,
  which run in MindSpore's threads), n = {thread_counts}.
- GRAPH routes: one nn.Cell per route, compiled once before timing. 'native' is the fastest
  right MindSpore equivalent in that mode (ops.* or mint.*; every candidate is in the run's
  summary, ops/<cell>.json). pyfunc: ops.Custom(func_type="pyfunc") calling the torch function
  through numpy. seed_aot: csrc/examples/leaky_relu.cpp built with `python -m ms_aten.build`
  ({seed_note}). empty_aot: benchmarks/ops/empty_kernel.cpp, a Custom aot kernel that returns at
  once (not checked: it computes nothing): MindSpore's own cost of launching any Custom op.
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI smoke run: small, one round")
    parser.add_argument("--out", type=Path, help="folder for ops/ (default: benchmarks/results, or "
                                      "benchmarks/results/quick with --quick)")
    parser.add_argument("--note", default="", help="a line for the results header, e.g. "
                                                   "what else loaded the machine")
    parser.add_argument("--ops", help="comma-separated subset of the benchmarked ops")
    parser.add_argument("--processes", type=int, help="rounds of fresh processes (default 3, "
                                                      "--quick 1)")
    parser.add_argument("--report-only", action="store_true",
                        help="only rewrite ops/README.md from the cell summaries there")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    plan = plan_for(args.quick, args.ops)
    if args.report_only:
        print(f"wrote {write_markdown(args.out or plan.out)}")
        return 0
    rounds = args.processes or (1 if args.quick else 3)
    flags = (["--quick"] if args.quick else []) + (["--ops", args.ops] if args.ops else [])
    started, load_start = time.time(), os.getloadavg()
    ms_runs, baselines = [], []
    for r in range(rounds):
        for side in ("torch", "ms_aten") if r % 2 == 0 else ("ms_aten", "torch"):
            print(f"[{time.time() - started:5.0f} s] round {r + 1}/{rounds}: {side}", flush=True)
            result = workers.run(WORKERS[side], flags)
            (baselines if side == "torch" else ms_runs).append(result)
    merged = {part: [merge([case_from_dict(dict(run[part][i])) for run in ms_runs],
                           [b["baselines"] for b in baselines])
                     for i in range(len(ms_runs[0][part]))]
              for part in PARTS}
    seed_note = ms_runs[0]["seed_aot"]
    config = plan.small
    meta = {
        "quick": args.quick,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": f"{platform.platform()}, {os.cpu_count()} CPUs",
        "versions": f"python {platform.python_version()}, {ms_runs[0]['versions']}",
        "threads": f"{ms_runs[0]['threads_note']} (the MindSpore worker); the baseline worker "
                   f"at torch's default, {baselines[0]['default_threads']}",
        "loadavg_start": tuple(round(x, 2) for x in load_start),
        "loadavg_end": tuple(round(x, 2) for x in os.getloadavg()),
        "wall_s": time.time() - started,
        "processes": rounds,
        "seed_aot": seed_note,
        "timing": {"small": plan.small.__dict__, "large": plan.large.__dict__,
                   "dispatcher": plan.dispatcher.__dict__, "chain_length": plan.chain_length},
        "note": args.note,
        "method": METHOD.format(processes=rounds, repeats=config.repeats,
                                repeats_large=plan.large.repeats,
                                target_ms=config.target_s * 1e3, slow_s=plan.large.slow_s,
                                slow_repeats=plan.large.slow_repeats, seed_note=seed_note,
                                thread_counts=" and ".join(map(str, THREAD_COUNTS))),
    }
    report = Report(meta, *(merged[part] for part in PARTS))
    name = cell_name(plan.ops, QUICK.ops if args.quick else ALL_OPS, args.quick)
    for path in write(report, args.out or plan.out, name):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
