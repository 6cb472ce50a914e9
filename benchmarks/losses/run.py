"""Losses: cross entropy's forward and backward over a language model's logits (GPT-2's
vocabulary), torch eager against ms_aten.nn.CrossEntropyLoss and MindSpore's ops.cross_entropy.

    .venv/bin/python -m benchmarks.losses.run [--processes 3] [--note "..."]
    .venv/bin/python -m benchmarks.losses.run --quick --out /tmp/l     # a smoke run (CI)

Method:
- One step: the mean cross entropy of (rows, classes) float32 logits against int class targets,
  and its gradient with respect to the logits, both read back (torch: F.cross_entropy and
  torch.autograd.grad; MindSpore: ms.value_and_grad of the loss Cell, in GRAPH and PYNATIVE).
- torch eager runs in losses/worker_torch.py, a process that never imports MindSpore; each
  MindSpore route × mode in losses/worker_ms_aten.py, a process of its own; each job in
  --processes fresh processes, torch's and MindSpore's alternating, every other round
  backwards. Per process, the median of --calls steps after one warm-up step; figures are the
  medians over the processes. Every route's loss and gradient sum must match torch's (1e-4
  relative). ms_aten's kernel launches per step are counted.
Writes a summary per size, benchmarks/results/losses/<rows>x<classes>.json, and rewrites
losses/README.md from every one there (--out DIR elsewhere; --quick only with --out).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.common import summaries, workers

TORCH, MS = "benchmarks.losses.worker_torch", "benchmarks.losses.worker_ms_aten"
FAMILY = "losses"
ROUTES = [(route, mode) for route in ("ms_aten.nn", "mindspore") for mode in ("graph", "pynative")]


def bench(rows: int, classes: int, calls: int, processes: int) -> dict:
    size = ["--rows", str(rows), "--classes", str(classes), "--calls", str(calls)]
    jobs = [("torch",)] + [("ms", route, mode) for route, mode in ROUTES]
    runs: dict[str, list[dict]] = {}
    for job in workers.schedule(jobs, processes):
        if job[0] == "torch":
            name, result = "torch", workers.run(TORCH, size)
        else:
            name = f"{job[1]} {job[2]}"
            result = workers.run(MS, ["--route", job[1], "--mode", job[2], *size])
        runs.setdefault(name, []).append(result)
        print(f"  {name:22} {result['ms']:9.2f} ms", flush=True)
    want = runs["torch"][0]
    table = {}
    for name, results in runs.items():
        for result in results:
            np.testing.assert_allclose([result["loss"], result["grad_abs_sum"]],
                                       [want["loss"], want["grad_abs_sum"]], rtol=1e-4,
                                       err_msg=name)
        entry = {"ms": statistics.median(r["ms"] for r in results),
                 "per_process_ms": [r["ms"] for r in results]}
        if "launches_per_call" in results[0]:
            entry["launches_per_call"] = results[0]["launches_per_call"]
        table[name] = entry
    return table


def section(name: str, cell: dict) -> str:
    meta, table = cell["meta"], cell["routes"]
    torch_ms = table["torch"]["ms"]
    lines = [summaries.machine_lines(meta) + f"- {meta['processes']} processes per route, "
             f"{meta['calls']} steps per process", "",
             "| route | forward + backward | ratio to torch | launches / step |",
             "|---|---:|---:|---:|"]
    for route, entry in table.items():
        launches = entry.get("launches_per_call")
        lines.append(f"| {route} | {entry['ms']:.3g} ms | ×{entry['ms'] / torch_ms:.2f} | "
                     f"{'' if launches is None else f'{launches:g}'} |")
    return "\n".join(lines)


def write_markdown(out: Path) -> Path:
    return summaries.write_report(out / FAMILY, "Losses: cross entropy's forward and backward",
                                  summaries.method(__doc__), section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--classes", type=int, default=50257)
    parser.add_argument("--quick", action="store_true", help="small logits, one process each")
    workers.add_report_arguments(parser, FAMILY)
    args = parser.parse_args()
    if workers.report_only(args, write_markdown):
        return
    if args.quick and args.out is None:
        parser.error("--quick writes only with --out (a smoke run is not a measurement)")
    if args.quick:
        args.processes, args.calls, args.rows, args.classes = 1, 3, 8, 100
    started, load = time.time(), os.getloadavg()
    table = bench(args.rows, args.classes, args.calls, args.processes)
    meta = {**workers.machine_meta(started, load), "note": args.note,
            "processes": args.processes, "calls": args.calls}
    summaries.write_cell((args.out or workers.RESULTS) / FAMILY, f"{args.rows}x{args.classes}",
                         {"meta": meta, "routes": table})
    print(f"wrote {write_markdown(args.out or workers.RESULTS)}")


if __name__ == "__main__":
    main()
