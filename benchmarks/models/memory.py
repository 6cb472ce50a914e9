"""Peak memory of a whole model's forward and of its forward+backward: ms_aten in GRAPH mode
against torch eager, each measured alone in fresh processes.

    .venv/bin/python -m benchmarks.models.memory [--models gpt2-medium bert-medium]
        [--processes 3] [--out DIR] [--report-only]

Each figure is the peak resident memory one call adds, after two warm-up calls, in a fresh
worker process (models/run.py's workers, `--measure memory`): the peak (VmHWM) is reset by
writing 5 to /proc/self/clear_refs before the call, and the resident size then is subtracted.
What the warm-up left allocated (weights, torch's gradients, kept and zeroed; MindSpore's
memory pool, which holds ms_aten's gradient buffers) counts in neither side's figure: the
figures are the activations and temporaries of one call. glibc's malloc is told to return
every block of 128 KiB or more to the system at once (GLIBC_TUNABLES), on both sides, so that
freed memory does not stay resident and hide the next call's peak. Each route runs in
--processes processes, torch's and ms_aten's alternating; the figure is the median. The
forward+backward is measured with the backward from the forward's kept graph (the default) and
with the recompute fallback.
Writes a summary per model, benchmarks/results/memory/<model>.json, and rewrites
memory/README.md from every one there (--out DIR elsewhere).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from benchmarks.common import summaries, workers
from benchmarks.models.run import run_worker
from benchmarks.models.workloads import CONFIGS, TORCH_FORWARD, TORCH_GRAD

PAIRS = [  # (torch route, the ms_aten route measured against it)
    (TORCH_FORWARD, "GRAPH forward cell(x)"),
    (TORCH_GRAD, "GRAPH forward+backward"),
    (TORCH_GRAD, "GRAPH forward+backward, recompute"),
]
# Fixed thresholds also stop glibc from raising them as big blocks are freed.
MALLOC = "glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072"
FAMILY = "memory"


def measure(model: str, processes: int) -> dict:
    """Each ms_aten route of PAIRS and each torch route they compare with, in `processes`
    fresh processes per route (workers.schedule's order): the medians, per ms_aten
    route."""
    jobs = list(dict.fromkeys([("torch", t) for t, _ in PAIRS]))
    jobs += [("ms_aten", m) for _, m in PAIRS]
    figures: dict[tuple[str, str], list[dict]] = {job: [] for job in jobs}
    for side, route in workers.schedule(jobs, processes):
        result = run_worker(side, model, route, ["--measure", "memory"],
                            {"GLIBC_TUNABLES": MALLOC})
        figures[(side, route)].append(result["memory"][route])

    def medians(runs: list[dict]) -> dict:
        return {"peak_mib": statistics.median(r["peak_mib"] for r in runs),
                "rss_mib": statistics.median(r["rss_mib"] for r in runs),
                "per_process_peak_mib": [r["peak_mib"] for r in runs]}
    rows = {}
    for torch_route, ms_route in PAIRS:
        row = {"torch route": torch_route, "torch": medians(figures[("torch", torch_route)]),
               "ms_aten": medians(figures[("ms_aten", ms_route)])}
        torch_peak = row["torch"]["peak_mib"]
        row["ratio"] = row["ms_aten"]["peak_mib"] / torch_peak if torch_peak > 0 else None
        rows[ms_route] = row
    return rows


def report(results: dict[str, dict]) -> str:
    lines = ["| model | ms_aten route | ms_aten peak MiB | torch route | torch peak MiB | ratio "
             "| resident before, ms_aten / torch MiB | per process, ms_aten / torch |",
             "|---|---|---:|---|---:|---:|---:|---|"]
    for model, rows in results.items():
        for route, row in rows.items():
            t, m = row["torch"], row["ms_aten"]
            ratio = f"×{row['ratio']:.2f}" if row["ratio"] is not None else "–"
            lines.append(
                f"| {model} | {route} | {m['peak_mib']:.1f} | {row['torch route']} | "
                f"{t['peak_mib']:.1f} | {ratio} | {m['rss_mib']:.0f} / {t['rss_mib']:.0f} | "
                f"{', '.join(f'{x:.1f}' for x in m['per_process_peak_mib'])} / "
                f"{', '.join(f'{x:.1f}' for x in t['per_process_peak_mib'])} |")
    return "\n".join(lines)


def section(name: str, cell: dict) -> str:
    """A model's part of the report: its run and its routes' peaks."""
    meta = cell["meta"]
    return (summaries.machine_lines(meta) + f"- {meta['processes']} processes per route\n\n"
            + report({cell["model"]: cell["routes"]}))


def write_markdown(out: Path) -> Path:
    """memory/README.md under `out`, from every model's summary there."""
    return summaries.write_report(out / FAMILY,
                                  "Peak memory: ms_aten against torch eager",
                                  __doc__.split("\n\n", 2)[2].split("\nWrites", 1)[0], section)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", choices=list(CONFIGS),
                        default=["gpt2-medium", "bert-medium"])
    parser.add_argument("--processes", type=int, default=3)
    workers.add_report_arguments(parser, FAMILY)
    args = parser.parse_args(argv)
    out = args.out or workers.RESULTS
    if workers.report_only(args, write_markdown):
        return
    for model in args.models:
        started, load_start = time.time(), os.getloadavg()
        rows = measure(model, args.processes)
        print(report({model: rows}), flush=True)
        meta = {**workers.machine_meta(started, load_start), "note": args.note,
                "processes": args.processes}
        summaries.write_cell(out / FAMILY, model,
                             {"meta": meta, "model": model, "routes": rows})
    print(f"wrote {write_markdown(out)}")


if __name__ == "__main__":
    main()
