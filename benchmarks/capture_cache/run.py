"""The capture cache (docs/capture_cache.md): time to the first result in a first process (an
empty cache: it captures and stores) and in a second one (it reads the entry), and where the
first capture's time goes.

    .venv/bin/python -m benchmarks.capture_cache.run                  # GPT-2 small
    .venv/bin/python -m benchmarks.capture_cache.run --models qwen2-0.5b   # a quiet machine
    .venv/bin/python -m benchmarks.capture_cache.run --quick --out /tmp/c   # tiny GPT-2 (smoke)

Method:
- Per model, a fresh cache folder ($MS_ATEN_PROGRAM_CACHE); for each route, worker.py in two
  fresh processes one after the other, GRAPH mode, random weights (worker.CONFIGS: no
  download): `ms_aten.module(model, (tokens,))` and its first forward, then
  `ms_aten.causal_lm(model, 12)` and `ms_aten.generate` of 4 tokens after an 8-token prompt.
- The time runs from the ms_aten call to the first result on the host (logits, tokens); the
  imports and the model's construction are not in it. Each result is checked against torch's
  (the logits to 1e-3, the tokens equal to model.generate's).
- The first process's capture time is split into torch.export, run_decompositions (both timed
  by wrapping torch's functions in the worker) and ms_aten's own: the rest of the capture
  (the key's description, the graph rewrites, lowering, storing the entry). The second
  process's capture is the key's description and reading the entry; the rest of its time is
  MindSpore compiling and running the first call.
- Qwen2-0.5B's shapes (494 M parameters, `--models qwen2-0.5b`) need about 8 GiB and a quiet
  machine: on a shared 2-core one its figures say more about the neighbours than the cache.
Writes a summary per model, benchmarks/results/capture_cache/<model>.json, and rewrites
capture_cache/README.md from every one there (--out DIR elsewhere).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import summaries, workers

FAMILY = "capture_cache"
ROUTES = ("module", "causal_lm")


def bench_model(model: str) -> dict:
    cells = {}
    for route in ROUTES:
        with tempfile.TemporaryDirectory(prefix="ms_aten_capture_cache_") as folder:
            env = {"MS_ATEN_PROGRAM_CACHE": folder}
            first, second = (workers.run("benchmarks.capture_cache.worker",
                                         ["--model", model, "--route", route], env)
                             for _ in range(2))
        for result in (first, second):
            if not result["right"]:
                raise RuntimeError(f"{model} {route}: ms_aten's result differs from torch's")
        if (first["cache"], second["cache"]) != ("stored", "hit"):
            raise RuntimeError(f"{model} {route}: the cache did {first['cache']}, then "
                               f"{second['cache']}; expected stored, then hit")
        torch_s = first["torch.export_s"] + first["run_decompositions_s"]
        cells[route] = {
            "first_s": first["seconds"], "second_s": second["seconds"],
            "second_capture_s": second["capture_s"],
            "first_capture": {"torch.export_s": first["torch.export_s"],
                              "run_decompositions_s": first["run_decompositions_s"],
                              "ms_aten_s": round(first["capture_s"] - torch_s, 3),
                              "capture_over_torch": round(first["capture_s"] / torch_s, 2)}}
    return cells


def section(name: str, summary: dict) -> str:
    lines = [summaries.machine_lines(summary["meta"]), "",
             "| route | first process | second process (of it, the cache) | first capture: "
             "torch.export | run_decompositions | ms_aten's own | capture / (export + "
             "decompositions) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for route, cell in summary["routes"].items():
        capture = cell["first_capture"]
        lines.append(f"| {route} | {cell['first_s']:.2f} s | {cell['second_s']:.2f} s "
                     f"({cell['second_capture_s']:.2f} s) | "
                     f"{capture['torch.export_s']:.2f} s | {capture['run_decompositions_s']:.2f}"
                     f" s | {capture['ms_aten_s']:.2f} s | {capture['capture_over_torch']}× |")
    return "\n".join(lines)


def write_markdown(folder: Path) -> Path:
    return summaries.write_report(folder / FAMILY, "The capture cache: first and second process",
                                  summaries.method(__doc__ or ""), section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--models", nargs="+", default=["gpt2-small"])
    parser.add_argument("--quick", action="store_true", help="a tiny GPT-2: a smoke run")
    workers.add_report_arguments(parser, FAMILY)
    args = parser.parse_args()
    if workers.report_only(args, write_markdown):
        return
    if args.quick:
        if args.out is None:
            parser.error("--quick writes only with --out")
        args.models = ["gpt2-tiny"]
    out = args.out or workers.RESULTS
    for model in args.models:
        started, load = time.time(), os.getloadavg()
        routes = bench_model(model)
        summary = {"meta": {**workers.machine_meta(started, load), "note": args.note},
                   "routes": routes}
        print(summaries.dumps(summary))
        summaries.write_cell(out / FAMILY, model, summary)
    print(f"wrote {write_markdown(out)}")


if __name__ == "__main__":
    main()
