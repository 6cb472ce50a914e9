"""Dynamic shapes: issue 18's two workloads on a tiny GPT-2, torch eager against ms_aten captured
with dynamic_shapes (one capture) and captured statically (one capture per shape).

    .venv/bin/python -m benchmarks.dynamic.run [--processes 3] [--note "..."]
    .venv/bin/python -m benchmarks.dynamic.run --quick --out /tmp/d     # a smoke run (CI)

Method:
- decode: greedy decoding from an 8-token prompt to 40 tokens without a KV cache, each token
  read back before the next step (32 calls, 32 lengths); train: batches of 4 sequences at 6
  lengths, 2 epochs, Adam at lr 1e-3 (torch.optim.Adam, and ms_aten.optim.Adam, torch's update).
- torch eager runs in dynamic/worker_torch.py, a process that never imports MindSpore; each
  ms_aten route (mode × dynamic/static) in dynamic/worker_ms_aten.py, a process of its own; each
  job in --processes fresh processes, torch's and ms_aten's alternating, every other round
  backwards; figures are medians over the processes. --quick runs each workload's ms_aten routes
  in one process, in turns: a smoke run, not a measurement.
- Per process: the cold run (the first run of the workload in the process: for ms_aten, the
  capture before it, and every capture and compile it triggers) is the total; its first call;
  its ms per item after the first call; and the steady state, the median of the --warm runs'
  (default 5) ms per item. The decoded tokens must equal torch's, and the losses be within 1e-3
  relative of torch's, in every process. ms_aten's kernel launches per item are counted in a
  warm run.
- The dynamic route's steady state is compared with the static route's on the same lengths
  (issue 18's goal: at most ×1.2).
Writes a summary per workload, benchmarks/results/dynamic/<workload>.json (the tokens and
losses every route matched as their hash), and rewrites dynamic/README.md from every one there
(--out DIR elsewhere; --quick only with --out).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.common import summaries, workers
from benchmarks.dynamic.workloads import LENGTHS, PROMPT, TOKENS

TORCH, MS_ATEN = "benchmarks.dynamic.worker_torch", "benchmarks.dynamic.worker_ms_aten"
WORKLOADS = ("decode", "train")
FAMILY = "dynamic"
ROUTES = [(mode, shapes) for shapes in ("dynamic", "static") for mode in ("graph", "pynative")]
FIGURES = ("total_s", "first_call_s", "after_first_ms", "steady_ms")
# A smoke run decodes 4 tokens, not 32, and trains on 2 of the 6 lengths: the static routes
# capture (and in GRAPH mode compile) once per length.
QUICK_TOKENS, QUICK_LENGTHS = PROMPT + 4, 2


def worker(job: tuple[str, ...], warm: int, tokens: int, lengths: int) -> dict[str, dict]:
    """A job's results by route ("torch" for torch's): (side, workload, *routes)."""
    side, workload, *routes = job
    arguments = ["--workload", workload, "--warm", str(warm), "--tokens", str(tokens),
                 "--lengths", str(lengths)]
    if side == "torch":
        return {"torch": workers.run(TORCH, arguments)}
    return workers.run(MS_ATEN, [*arguments, *(a for r in routes for a in ("--route", r))]
                       )["routes"]


def check(workload: str, got: list, want: list, job: tuple[str, ...]) -> None:
    """The decoded tokens equal torch's; the training losses are within 1e-3 of torch's."""
    if workload == "decode" and got != want:
        raise AssertionError(f"{job}: tokens {got} differ from torch's {want}")
    np.testing.assert_allclose(got, want, rtol=1e-3, err_msg=str(job))


def median_figures(results: list[dict]) -> dict:
    entry = {key: statistics.median(r[key] for r in results) for key in FIGURES}
    entry["per_process"] = {key: [r[key] for r in results] for key in FIGURES}
    if "launches_per_item" in results[0]:
        entry["launches_per_item"] = results[0]["launches_per_item"]
    return entry


def bench(processes: int, warm: int, tokens: int, lengths: int, quick: bool) -> dict:
    """Every job in its --processes fresh processes; with `quick`, each workload's ms_aten
    routes in one process, in turns."""
    names = ["-".join(route) for route in ROUTES]
    jobs = [("torch", w) for w in WORKLOADS] + [
        job for w in WORKLOADS
        for job in ([("ms_aten", w, *names)] if quick else [("ms_aten", w, n) for n in names])]
    runs: dict[tuple[str, str], list[dict]] = {
        (w, r): [] for w in WORKLOADS for r in ["torch", *names]}
    for job in workers.schedule(jobs, processes):
        started = time.perf_counter()
        for route, result in worker(job, warm, tokens, lengths).items():
            runs[(job[1], route)].append(result)
            print(f"  {job[1]} {route:20} total {result['total_s']:8.2f} s, steady "
                  f"{result['steady_ms']:8.2f} ms/item ({time.perf_counter() - started:.0f} s)",
                  flush=True)
    rows: dict = {}
    for workload in WORKLOADS:
        reference = runs[(workload, "torch")]
        want = reference[0]["produced"]
        rows[workload] = {"torch": median_figures(reference), "produced": want}
        for name in names:
            for result in runs[(workload, name)]:
                check(workload, result["produced"], want, (workload, name))
            rows[workload][name] = median_figures(runs[(workload, name)])
    return rows


def section(name: str, cell: dict) -> str:
    """A workload's part of the report: its run and its routes' figures."""
    meta, row, workload = cell["meta"], cell["routes"], cell["workload"]
    torch_row = row["torch"]
    lines = [summaries.machine_lines(meta)
             + f"- {meta['processes']} processes per job, {meta['warm']} warm runs per process",
             "", f"**{workload}**", "",
             "| | total (cold run) | first call | per item after the first | steady per item "
             "| launches / item |", "|---|---:|---:|---:|---:|---:|",
             f"| torch eager | {torch_row['total_s']:.3g} s | "
             f"{torch_row['first_call_s'] * 1e3:.3g} ms | "
             f"{torch_row['after_first_ms']:.3g} ms | {torch_row['steady_ms']:.3g} ms | |"]
    for route in ROUTES:
        entry = row["-".join(route)]
        mode, shapes = route
        lines.append(
            f"| ms_aten {mode.upper()}, {shapes} | {entry['total_s']:.3g} s "
            f"(×{entry['total_s'] / torch_row['total_s']:.3g}) | "
            f"{entry['first_call_s']:.3g} s | {entry['after_first_ms']:.3g} ms "
            f"(×{entry['after_first_ms'] / torch_row['after_first_ms']:.3g}) | "
            f"{entry['steady_ms']:.3g} ms (×{entry['steady_ms'] / torch_row['steady_ms']:.3g})"
            f" | {entry['launches_per_item']:g} |")
    for mode in ("graph", "pynative"):
        dynamic, static = row[f"{mode}-dynamic"], row[f"{mode}-static"]
        lines.append(f"\n{mode.upper()}: the dynamic route's steady state is "
                     f"×{dynamic['steady_ms'] / static['steady_ms']:.2f} the static "
                     f"route's on the same lengths.")
    return "\n".join(lines)


def write_markdown(out: Path) -> Path:
    """dynamic/README.md under `out`, from every workload's summary there."""
    return summaries.write_report(out / FAMILY,
                                  "Dynamic shapes: ms_aten against torch eager",
                                  summaries.method(__doc__), section)


def summary(meta: dict, workload: str, row: dict) -> dict:
    """A workload's summary: the run's record and settings, every route's figures, and what the
    routes made (decoded tokens, a training's losses: torch's, which each matched) as their
    hash."""
    return {"meta": meta, "workload": workload,
            "routes": {k: v for k, v in row.items() if k != "produced"},
            "produced": summaries.checked(row["produced"])}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one process per workload and side, one warm run, decoding "
                        f"to {QUICK_TOKENS} tokens, training on {QUICK_LENGTHS} lengths (a smoke "
                        "run)")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per job")
    # A GRAPH training loop runs slower for its first seconds after compiling (issue 26's note:
    # MindSpore's yielding thread pool beside ATen's spinning workers on 2 cores): more warm
    # runs put the steady state past it.
    parser.add_argument("--warm", type=int, default=5, help="warm runs per process")
    workers.add_report_arguments(parser, FAMILY)
    args = parser.parse_args(argv)
    if workers.report_only(args, write_markdown):
        return {}
    processes, warm, tokens, lengths = ((1, 1, QUICK_TOKENS, QUICK_LENGTHS) if args.quick
                                        else (args.processes, args.warm, TOKENS, len(LENGTHS)))
    started, load_start = time.time(), os.getloadavg()
    rows = bench(processes, warm, tokens, lengths, args.quick)
    meta = {**workers.machine_meta(started, load_start), "note": args.note,
            "processes": processes, "warm": warm, "tokens": tokens, "lengths": lengths}
    out = args.out or (None if args.quick else workers.RESULTS)
    written = {workload: summary(meta, workload, row) for workload, row in rows.items()}
    for workload, cell in written.items():
        print(f"\n{workload}:\n{section(workload, cell)}")
        if out is not None:
            summaries.write_cell(out / FAMILY, workload, cell)
    if out is not None:
        print(f"wrote {write_markdown(out)}")
    return written


if __name__ == "__main__":
    main()
