"""What an opaque torch call costs (docs/limits.md): the same MLP captured whole and with its
middle scale as an opaque torch call (worker.py), forward and forward+backward in each MindSpore
mode, each variant in fresh processes, the two alternating; the median over processes.

    python -m benchmarks.opaque.run [--processes 3] [--note "..."] [--out DIR]

--quick: the tiny shape, one process per variant: a check that every variant runs and matches
torch, not a measurement.

The tiny shape's difference is the cost of one opaque call (the round trip into Python from the
launch thread, and its backward's); the larger shapes say how much of a step it is.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.common import workers

SHAPES = [(64, 8), (256, 64), (1024, 256)]  # (width, batch)
MODES = ["GRAPH", "PYNATIVE"]
ROUTES = ["forward", "forward+backward"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the tiny shape, one process each")
    workers.add_report_arguments(parser, "opaque")
    args = parser.parse_args()
    folder = (args.out or workers.RESULTS) / "opaque"
    if workers.report_only(args, lambda out: write_markdown(out / "opaque")):
        return
    started, load = time.time(), os.getloadavg()
    times: dict[tuple, list[float]] = {}
    launches: dict[tuple, int] = {}
    shapes, processes = (SHAPES[:1], 1) if args.quick else (SHAPES, args.processes)
    for r in range(processes):
        for width, batch in shapes:
            for mode in MODES:
                regions = ("none", "branch") if r % 2 == 0 else ("branch", "none")
                for region in regions:
                    result = workers.run("benchmarks.opaque.worker", [
                        "--width", str(width), "--batch", str(batch), "--region", region,
                        "--mode", mode])
                    for route in ROUTES:
                        key = (width, batch, mode, route, region)
                        times.setdefault(key, []).append(result["ms"][route])
                        launches[key] = result["launches"][route]
    folder.mkdir(parents=True, exist_ok=True)
    summary = {"meta": {**workers.machine_meta(started, load), "note": args.note,
                        "processes": processes, "quick": args.quick},
               "cells": [{"width": k[0], "batch": k[1], "mode": k[2], "route": k[3],
                          "region": k[4], "ms": v, "launches": launches[k]}
                         for k, v in times.items()]}
    (folder / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"wrote {write_markdown(folder)}")


def write_markdown(folder: Path) -> Path:
    summary = json.loads((folder / "summary.json").read_text())
    meta = summary["meta"]
    cells = {(c["width"], c["batch"], c["mode"], c["route"], c["region"]): c
             for c in summary["cells"]}
    lines = ["# The cost of an opaque torch call", "",
             "`python -m benchmarks.opaque.run` (its docstring says what runs).", "",
             f"- {meta['date']}; {meta['host']}; {meta['wall_s']} s",
             f"- load average (1/5/15 min) at start {tuple(meta['loadavg_start'])}, at end "
             f"{tuple(meta['loadavg_end'])}",
             f"- note: {meta['note'] or '-'}",
             f"- {meta['processes']} processes per variant; ms per call, the median over them",
             "", "| MLP width, batch | mode | route | captured whole | with an opaque call | "
             "difference | ratio | launches / call | per process (whole; opaque) |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for width, batch in SHAPES:
        for mode in MODES:
            for route in ROUTES:
                whole = cells.get((width, batch, mode, route, "none"))
                part = cells.get((width, batch, mode, route, "branch"))
                if whole is None or part is None:
                    continue
                a, b = statistics.median(whole["ms"]), statistics.median(part["ms"])
                lines.append(
                    f"| {width}, {batch} | {mode} | {route} | {a:.3f} | {b:.3f} | "
                    f"{b - a:+.3f} | ×{b / a:.2f} | {part['launches']} | "
                    f"{', '.join(f'{x:.3g}' for x in whole['ms'])}; "
                    f"{', '.join(f'{x:.3g}' for x in part['ms'])} |")
    path = folder / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


if __name__ == "__main__":
    main()
