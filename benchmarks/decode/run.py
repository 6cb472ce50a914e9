"""Decoding with a KV cache: GPT-2 generating greedily, ms_aten.causal_lm and ms_aten.generate
against torch eager, each route timed alone in fresh processes.

    .venv/bin/python -m benchmarks.decode.run                       # GPT-2 small and medium
    .venv/bin/python -m benchmarks.decode.run --quick --out /tmp/d  # tiny GPT-2, a smoke run (CI)
    .venv/bin/python -m benchmarks.decode.run --models gpt2-medium --processes 5 \\
        --note "under load: two other engineers' builds"

Method:
- Batch 1, a 32-token prompt, 128 new tokens, greedy, over a static cache of 1,024 positions;
  GPT-2 with random weights (seed 0): small (12 layers, 768 wide, vocab 50257) and the models
  benchmark's medium (4 layers, 256 wide, vocab 1000), both with 1,024 positions.
- Routes. torch eager, under no_grad: transformers' TorchExportableModuleWithStaticCache called
  token by token in a Python loop (the computation ms_aten captures), and model.generate with
  its default dynamic cache. ms_aten, over ms_aten.causal_lm (that wrapper captured once, the
  sequence dim dynamic, the cache Parameters written in place): ms_aten.generate in GRAPH mode
  (the whole loop one compiled graph), and a Python loop calling the Cell per token in GRAPH
  mode (compiled once) and in PYNATIVE mode; the three again with compile=True (the
  step compiled by AOTInductor, in a compile cache of the run's own: the first process's capture
  time includes the compile, the later ones load it). Each loop reads the logits back and takes
  the argmax between calls.
- A torch worker first computes model.generate's tokens; every generation of every route, in
  every process, must make exactly these (each worker checks, and so does this driver). torch
  eager runs in decode/worker_torch.py, a process that never imports MindSpore; ms_aten in
  decode/worker_ms_aten.py, which runs no torch computation of its own beside the capture.
- One route per process, in --processes fresh processes (default 3), torch's and ms_aten's
  alternating, every other round backwards. Per process: one cold generation (the capture is
  before it; GRAPH compiles in it), then --runs timed ones (default 3), their median; the
  route's figure is the median over its processes.
- Per generation: the prefill (the prompt's call until the first token is on the host),
  decode tokens/s (the 127 tokens after the first), the ms per token fed at cache positions
  40 and 150 (the median over ±4 tokens: with a static cache it must not grow), the total and
  its tokens/s. ms_aten.generate is one graph call: only its total is seen.
- Memory: the resident size (VmRSS) before the timed generations, and their peak (VmHWM,
  reset to the resident size before them): a peak at the resident size means the cache is
  held once and written in place. ms_aten's kernel launches per token over the timed runs.
- ATen's default threads on both sides (one per core).
--quick: tiny GPT-2 (8-token prompt, 24 new tokens, 64 positions), every route of a side in one
process, one timed generation, the compiled routes left out unless --routes names them (the
compile takes longer than the rest; tests/test_compile.py covers it): a check that every route
runs and makes torch's tokens, not a measurement.
Writes a summary per cell, benchmarks/results/decode/<model>_<group>.json: the GRAPH routes
(graph), the PYNATIVE one (pynative), the compiled ones (compiled), each with torch's routes of
its run; and rewrites decode/README.md from every cell there (--out DIR elsewhere; --quick only
with --out).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.common import summaries, workers
from benchmarks.decode.workloads import (
    COMPILED_ROUTES,
    MS_ATEN_ROUTES,
    TORCH_ROUTES,
    WINDOW,
    WORKLOADS,
    median_figures,
)

WORKERS = {"torch": "benchmarks.decode.worker_torch",
           "ms_aten": "benchmarks.decode.worker_ms_aten"}
ROUTES = {**TORCH_ROUTES, **MS_ATEN_ROUTES}
DEFAULT_MODELS = ("gpt2-small", "gpt2-medium")
FAMILY = "decode"
# ms_aten's routes by cell: a model's cells are these groups, each with torch's routes beside.
GROUPS = {"graph": ("graph-generate", "graph-loop"), "pynative": ("pynative-loop",),
          "compiled": COMPILED_ROUTES}


def side_of(route: str) -> str:
    return "torch" if route in TORCH_ROUTES else "ms_aten"


def reference_tokens(model: str) -> list[int]:
    """torch's model.generate tokens, from a torch worker (never from this process's torch, nor
    the ms_aten workers': see the method)."""
    return workers.run(WORKERS["torch"], ["--model", model, "--reference"])["tokens"]


def bench_model(model: str, routes: list[str], processes: int, runs: int, quick: bool) -> dict:
    """Every route of `model`: per-process figures, then their medians."""
    reference = reference_tokens(model)
    jobs = [(side_of(r), r) for r in routes]
    results: dict[str, list[dict]] = {r: [] for r in routes}
    with tempfile.TemporaryDirectory() as folder:
        expect = Path(folder) / "tokens.json"
        expect.write_text(json.dumps(reference))
        extra = ["--model", model, "--runs", str(runs), "--expect", str(expect)]
        env = {"MS_ATEN_CACHE_DIR": str(Path(folder) / "compiled")}
        if quick:  # every route of a side in one process, in turns
            for side in ("torch", "ms_aten"):
                mine = [a for r in routes if side_of(r) == side for a in ("--route", r)]
                if mine:
                    result = workers.run(WORKERS[side], [*extra, *mine], env)
                    for route in routes:
                        if side_of(route) == side:
                            results[route].append({**result["routes"][route],
                                                   "meta": result["meta"]})
        else:
            for side, route in workers.schedule(jobs, processes):
                started = time.perf_counter()
                result = workers.run(WORKERS[side], [*extra, "--route", route], env)
                results[route].append({**result["routes"][route], "meta": result["meta"]})
                print(f"  {model} {ROUTES[route]:45} {result['routes'][route]['total_s']:8.2f} s "
                      f"({time.perf_counter() - started:.0f} s)", flush=True)
    row: dict = {"reference": reference, "routes": {}}
    for route, per_process in results.items():
        for result in per_process:
            if result["tokens"] != reference:
                raise AssertionError(f"{model} {route}: tokens {result['tokens']} differ from "
                                     f"model.generate's {reference}")
        figures = [{k: v for k, v in r.items() if k not in ("runs", "tokens", "meta")}
                   for r in per_process]
        row["routes"][route] = {**median_figures(figures),
                                "per_process_total_s": [r["total_s"] for r in per_process],
                                "meta": per_process[0]["meta"]}
    return row


def by_group(routes: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """A model's routes split into its cells (GROUPS), torch's routes with each (the references
    its figures are given against); torch's alone as "torch" when no ms_aten route ran."""
    torch_routes = {r: e for r, e in routes.items() if side_of(r) == "torch"}
    split = {group: {**torch_routes, **{r: e for r, e in routes.items() if r in mine}}
             for group, mine in GROUPS.items() if any(r in routes for r in mine)}
    return split or {"torch": torch_routes}


def summary(meta: dict, model: str, reference: list[int], routes: dict[str, dict]) -> dict:
    """A cell's summary: the run's record and settings, the workload, its routes' figures, and
    model.generate's tokens (which every route made) as their hash."""
    return {"meta": meta, "model": model, "workload": asdict(WORKLOADS[model]),
            "reference": summaries.checked(reference), "routes": routes}


def cell_figure(entry: dict, key: str, form: str) -> str:
    return format(entry[key], form) if key in entry else "—"


def section(name: str, cell: dict) -> str:
    """A cell's part of the report: its run and its routes' figures."""
    meta, model = cell["meta"], cell["model"]
    w = WORKLOADS[model]
    positions = [str(p) for p in w.positions]
    lines = [summaries.machine_lines(meta).rstrip(),
             f"- {meta['processes_per_route']} processes per route, {meta['runs']} timed "
             f"generations per process",
             "", f"**{model}** ({w.layers} layers, {w.hidden} wide, vocab {w.vocab}; "
             f"{w.prompt}-token prompt, {w.new_tokens} new tokens; cache of "
             f"{w.max_cache_len} positions, {w.cache_mib():.3g} MiB)", "",
             "| route | prefill ms | decode tokens/s | "
             + " | ".join(f"ms/token at {p}" for p in positions)
             + " | total s | tokens/s overall | total ×torch loop | launches / token | "
               "RSS before MiB | peak MiB | capture s | cold generation s | "
               "total per process (s) |",
             "|---|" + "---:|" * (10 + len(positions)) + "---|"]
    loop = cell["routes"].get("static-loop")
    for route, entry in cell["routes"].items():
        per_token = entry.get("per_token_ms", {})
        ratio = f"×{entry['total_s'] / loop['total_s']:.2f}" if loop else "—"
        launches = f"{entry['launches_per_token']:g}" if side_of(route) == "ms_aten" else "—"
        lines.append(
            f"| {ROUTES[route]} | {cell_figure(entry, 'prefill_ms', '.3g')} | "
            f"{cell_figure(entry, 'decode_tokens_per_s', '.4g')} | "
            + " | ".join(cell_figure(per_token, p, ".3g") for p in positions)
            + f" | {entry['total_s']:.3g} | {entry['tokens_per_s']:.4g} | {ratio} | "
              f"{launches} | {entry['rss_before_mib']:.0f} | {entry['peak_mib']:.0f} | "
              f"{entry['setup_s']:.2f} | {entry['cold_s']:.3g} | "
              f"{', '.join(f'{x:.3g}' for x in entry['per_process_total_s'])} |")
    whole = [MS_ATEN_ROUTES[r] for r in cell["routes"] if r.endswith("generate")
             and side_of(r) == "ms_aten"]
    if whole:
        lines.append(f"\n{' and '.join(whole)} run the prompt and every token in one graph "
                     f"call: only the total and tokens/s are seen (no prefill or per-token "
                     f"times).")
    return "\n".join(lines)


def write_markdown(out: Path) -> Path:
    """decode/README.md under `out`, from every cell summary there."""
    return summaries.write_report(
        out / FAMILY, "Decoding with a KV cache: ms_aten against torch eager",
        summaries.method(__doc__), section,
        f"ms/token at a position: the median over the tokens fed within ±{WINDOW} positions. "
        f"Capture: ms_aten.causal_lm (torch: building the static cache).")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny GPT-2, every route in one process per side (a smoke run)")
    parser.add_argument("--models", nargs="*", choices=list(WORKLOADS))
    parser.add_argument("--routes", nargs="*", choices=list(ROUTES),
                        help="routes, torch's and ms_aten's (default: all; --quick: all but "
                             "the compiled ones)")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per route")
    parser.add_argument("--runs", type=int, default=3,
                        help="timed generations per process, after the cold one")
    workers.add_report_arguments(parser, FAMILY)
    args = parser.parse_args(argv)
    if workers.report_only(args, write_markdown):
        return {}
    names = args.models or (["gpt2-tiny"] if args.quick else list(DEFAULT_MODELS))
    processes, runs = (1, 1) if args.quick else (args.processes, args.runs)
    routes = args.routes or [r for r in ROUTES if not (args.quick and r in COMPILED_ROUTES)]
    out = args.out or (None if args.quick else workers.RESULTS)
    written = {}
    for name in names:
        print(f"{name}:", flush=True)
        started, load_start = time.time(), os.getloadavg()
        row = bench_model(name, routes, processes, runs, args.quick)
        meta = {**workers.machine_meta(started, load_start), "note": args.note,
                "quick": args.quick, "processes_per_route": processes, "runs": runs}
        for group, mine in by_group(row["routes"]).items():
            cell = f"{name}_{group}"
            written[cell] = summary(meta, name, row["reference"], mine)
            print(f"\n{cell}:\n{section(cell, written[cell])}", flush=True)
            if out is not None:
                summaries.write_cell(out / FAMILY, cell, written[cell])
    if out is not None:
        print(f"wrote {write_markdown(out)}")
    return written


if __name__ == "__main__":
    main()
