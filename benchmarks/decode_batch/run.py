"""Batched decoding: left-padded batches of prompts of mixed lengths, ms_aten.generate in both
modes against torch's model.generate and static-cache loop, and the decode step against the
bound set by reading the weights and the KV cache once at the machine's measured bandwidth.

    .venv/bin/python -m benchmarks.decode_batch.run                   # the full grid
    .venv/bin/python -m benchmarks.decode_batch.run --quick --out /tmp/d   # a smoke run (CI)
    .venv/bin/python -m benchmarks.decode_batch.run --models gpt2-small --batches 4 \\
        --dtypes float32 --new-tokens 16 --processes 1 --out /tmp/d  # a subset

Method:
- Models, random weights (drawn in float32 from seed 0, then cast): GPT-2 small (the decoding
  benchmark's: 12 layers, 768 wide, vocab 50257, 124 M parameters) and a Llama-style model of
  511 M parameters (Qwen2-0.5B's shape with a 32,000-token vocabulary: 24 layers, 1,024 wide,
  16 query heads over 4 key/value heads, MLP 5,632, the embedding tied to the head), each in
  float32 and bfloat16 (torch's kernels in that dtype on both sides; the next token is chosen
  from the logits cast to float32, as transformers does).
- Batches of 1, 4 and 16 prompts: at batch 1 one 32-token prompt, else lengths drawn between
  16 and 48 (numpy, seeded with the batch size), left-padded with their attention mask; 128
  greedy new tokens, no end token, over a static cache of the longest prompt + 128 positions.
- Routes, the mask given to each. torch eager, under no_grad: model.generate (its dynamic
  cache), and the static-cache loop: transformers' TorchExportableModuleWithStaticCache for the
  batch called token by token in Python, through the module ms_aten.causal_lm captures (the
  cache's layers attend to the positions written so far, as ms_aten's and model.generate's
  do). ms_aten: ms_aten.generate over ms_aten.causal_lm in GRAPH mode (the whole loop one
  compiled graph) and in PYNATIVE mode (the loop step by step); the same two over
  causal_lm(..., linear_kernel="onednn") (the large float32 linears on oneDNN's inner product;
  in bfloat16 nothing is rewritten, the two routes repeat the first two).
- A torch worker first makes model.generate's tokens. In float32 every generation of every
  route, in every process, must make exactly these (the workers and this driver check). In
  bfloat16 the rounding of a sum depends on its order, which a dynamic cache and a static
  one need not share: the tokens are compared and the report gives, per route, the rows equal
  to model.generate's and to torch's static-cache loop's (which runs the kernels ms_aten
  runs), not asserted. Within a process every generation must repeat the first timed one's
  tokens.
- One route per process, in --processes fresh processes per route (default 3), torch's and
  ms_aten's alternating, every other round backwards; torch's worker never imports MindSpore.
  Per process: the capture (ms_aten) or the static cache (torch), a warm-up generation of
  2 tokens (the prompt and one decode step; GRAPH compiles its loop in it), then --runs
  rounds (default 3) of a 128-token generation and a one-token one, timed; their medians; the
  route's figure is the median over its processes.
- Per route: tokens/s (batch x 128 / the total), the total, the prefill (the one-token
  generation: the prompt's call and the first token's choice), and the decode step: (total -
  prefill) / 127, the mean over positions, measured the same way for every route (the
  one-graph ms_aten.generate shows no steps). ms_aten's kernel launches per token; the
  resident memory before the timed generations and their peak.
- The bound: the bytes a decode step must read, the weights once (in the model's dtype; the
  tied embedding once, as the head reads it) and the KV cache's prefix it attends to (2 x
  layers x batch x kv heads x head dim x positions x dtype size, at the mean position of
  the decode steps: the longest prompt + 64), over the machine's memory bandwidth: the best
  of 5 copies of a 1 GiB buffer by torch (ATen's threads), counting read and write, measured
  in a torch worker at the start and at the end of the run (the better one is used). Beside
  each decode step: the bound and the step's ratio to it.
- ATen's default threads on both sides (one per core); nothing is set in the workers'
  environment but GLOG_v (MindSpore's log level).
--quick: the tiny Llama (2 layers, 64 wide, vocab 128), batches 1 and 2 (8-token prompt;
lengths 4-12), float32 and bfloat16, 12 new tokens, one process per side for every cell and
route, one timed round, a 256 MiB copy: a check that every route runs and makes the tokens
it should, not a measurement.
Writes a summary per cell, benchmarks/results/decode_batch/<model>_<dtype>_b<batch>.json for
ATen's linear kernel and ..._onednn.json for oneDNN's (each with torch's routes of its run), as
each is done, so that a failure keeps what was measured, and rewrites decode_batch/README.md
from every cell there (--out DIR elsewhere; --quick only with --out).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import summaries, workers
from benchmarks.decode.workloads import median_figures
from benchmarks.decode_batch.workloads import (
    DTYPES,
    FULL,
    MODELS,
    MS_ATEN_ROUTES,
    QUICK,
    TORCH_ROUTES,
    cell_key,
)

WORKERS = {"torch": "benchmarks.decode_batch.worker_torch",
           "ms_aten": "benchmarks.decode_batch.worker_ms_aten"}
ROUTES = {**TORCH_ROUTES, **MS_ATEN_ROUTES}
DEFAULT_MODELS = ("gpt2-small", "llama-0.5b")
BATCHES = (1, 4, 16)
BANDWIDTH_MIB = 1024  # the copied buffer (--quick: 256 MiB, in the torch worker)
FAMILY = "decode_batch"
# ms_aten's routes by linear kernel: a cell of the grid is a summary per kernel ("": ATen's).
KERNELS = {"": ("graph-generate", "pynative-generate"),
           "onednn": ("graph-onednn", "pynative-onednn")}


def side_of(route: str) -> str:
    return "torch" if route in TORCH_ROUTES else "ms_aten"


def per_route(processes: list[dict]) -> dict:
    """A route's figure over its processes: the median of each, and each process's total."""
    figures = [{k: v for k, v in p.items() if isinstance(v, float)} for p in processes]
    return {**median_figures(figures), "per_process_total_s": [p["total_s"] for p in processes],
            "tokens": processes[0]["tokens"],
            "tokens_agree": all(p["tokens"] == processes[0]["tokens"] for p in processes)}


def rows_equal(tokens: list[list[int]], other: list[list[int]]) -> int:
    return sum(a == b for a, b in zip(tokens, other, strict=True))


def finish_cell(model: str, dtype: str, cell: dict, results: dict[str, list[dict]]) -> dict:
    """The cell's routes over their processes, their tokens compared: in float32 all must be
    model.generate's (else AssertionError), in bfloat16 the matching rows are counted."""
    reference = cell["reference"]
    routes = {route: per_route(runs) for route, runs in results.items()}
    loop = routes.get("static-loop", {}).get("tokens")
    for route, entry in routes.items():
        for process in results[route]:
            if dtype == "float32" and process["tokens"] != reference:
                raise AssertionError(f"{model} {dtype} {route}: tokens {process['tokens']} "
                                     f"differ from model.generate's {reference}")
        entry["rows_equal_generate"] = rows_equal(entry["tokens"], reference)
        if loop is not None:
            entry["rows_equal_static_loop"] = rows_equal(entry["tokens"], loop)
    return {**cell, "routes": routes}


def bound(cell: dict, bandwidth_gb_s: float, new_tokens: int) -> dict:
    """The decode step's bytes (the weights, and the KV prefix at the steps' mean position)
    and their time at the bandwidth."""
    facts = cell["facts"]
    position = cell["width"] + new_tokens / 2  # the steps attend width+1 .. width+new-1
    step_bytes = facts["weight_bytes"] + facts["kv_bytes_per_position"] * position
    return {"step_bytes": step_bytes, "step_ms": step_bytes / bandwidth_gb_s / 1e6}


def route_flags(side: str, routes: list[str]) -> list[str]:
    return [a for r in routes if side_of(r) == side for a in ("--route", r)]


def bench_model(model: str, args: argparse.Namespace, shape_args: list[str],
                bandwidth: dict[str, float], save: Callable[[str, str, int, dict], None]) -> None:
    """Every cell (dtype x batch) of `model`, each saved when done: the reference, then every
    route's processes (--quick: one process per side for all, and the torch worker's copy
    into `bandwidth`)."""
    cells = [(dtype, batch) for dtype in args.dtypes for batch in args.batches]
    every = ["--model", model, "--dtypes", *args.dtypes, "--batches", *map(str, args.batches),
             *shape_args]
    with tempfile.TemporaryDirectory() as folder:
        expect = Path(folder) / "tokens.json"
        quick = [*route_flags("torch", args.routes), "--runs", str(args.runs), "--bandwidth",
                 "256"] if args.quick else []
        done = {"torch": workers.run(WORKERS["torch"], [*every, "--reference", *quick])}
        expect.write_text(json.dumps({key: cell["reference"]
                                      for key, cell in done["torch"]["cells"].items()}))
        if args.quick:
            done["ms_aten"] = workers.run(WORKERS["ms_aten"], [
                *every, *route_flags("ms_aten", args.routes), "--runs", str(args.runs), "--expect",
                str(expect)])
            bandwidth.setdefault("start", done["torch"]["bandwidth_gb_s"])
        for dtype, batch in cells:
            key = cell_key(dtype, batch)
            reference = done["torch"]["cells"][key]
            results: dict[str, list[dict]] = {r: [] for r in args.routes}
            if args.quick:
                for route in args.routes:
                    results[route].append(done[side_of(route)]["cells"][key]["routes"][route])
            else:
                one = ["--model", model, "--dtypes", dtype, "--batches", str(batch),
                       *shape_args, "--runs", str(args.runs), "--expect", str(expect)]
                jobs: list[workers.Job] = [(side_of(r), r) for r in args.routes]
                for side, route in workers.schedule(jobs, args.processes):
                    started = time.perf_counter()
                    result = workers.run(WORKERS[side], [*one, "--route", route])
                    results[route].append(result["cells"][key]["routes"][route])
                    print(f"  {model} {key:12} {ROUTES[route]:40} "
                          f"{results[route][-1]['total_s']:8.2f} s "
                          f"({time.perf_counter() - started:.0f} s)", flush=True)
            cell = {k: reference[k] for k in ("facts", "width", "lengths", "reference")}
            save(model, dtype, batch, finish_cell(model, dtype, cell, results))


def cell_name(model: str, dtype: str, batch: int, kernel: str = "") -> str:
    """A cell's summary's name: gpt2-small_float32_b1, and ..._onednn for oneDNN's kernel."""
    return f"{model}_{dtype}_b{batch}" + (f"_{kernel}" if kernel else "")


def by_kernel(routes: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """A grid cell's routes split by linear kernel (KERNELS), torch's routes with each (the
    references its figures are given against); torch's alone under "" when no ms_aten route
    ran."""
    torch_routes = {r: e for r, e in routes.items() if side_of(r) == "torch"}
    split = {kernel: {**torch_routes, **{r: e for r, e in routes.items() if r in mine}}
             for kernel, mine in KERNELS.items() if any(r in routes for r in mine)}
    return split or {"": torch_routes}


def summary(meta: dict, bandwidth: dict[str, float], model: str, dtype: str, batch: int,
            kernel: str, cell: dict, routes: dict[str, dict]) -> dict:
    """A cell's summary: the run's record and settings, the bandwidths, the prompts, and its
    routes' figures; the tokens as their hash (the reference's with its length and distinct
    tokens per row)."""
    return {"meta": meta, "model": model, "dtype": dtype, "batch": batch,
            "linear_kernel": kernel or "aten", "bandwidth_gb_s": bandwidth,
            "facts": cell["facts"], "width": cell["width"], "lengths": cell["lengths"],
            "reference": summaries.checked(cell["reference"]),
            "routes": {route: {**{k: v for k, v in entry.items() if k != "tokens"},
                               "tokens_sha256": summaries.sha256(entry["tokens"])}
                       for route, entry in routes.items()}}


def number(value: float | None, form: str) -> str:
    return "—" if value is None else format(value, form)


def section(name: str, cell: dict) -> str:
    """A cell's part of the report: its run, the bandwidth and the bound, its routes."""
    meta, batch = cell["meta"], cell["batch"]
    bandwidth = max(cell["bandwidth_gb_s"].values())
    new_tokens = meta["new_tokens"]
    facts, limit = cell["facts"], bound(cell, bandwidth, new_tokens)
    kernel = "" if cell["linear_kernel"] == "aten" else \
        f", linear_kernel={cell['linear_kernel']!r}"
    lines = [summaries.machine_lines(meta).rstrip(),
             f"- {meta['processes_per_route']} processes per route, {meta['runs']} timed rounds "
             f"per process, {new_tokens} new tokens",
             "- Memory bandwidth (a copy, read + write): "
             + ", ".join(f"{v:.1f} GB/s at the {k}" for k, v in cell["bandwidth_gb_s"].items())
             + f"; the bound uses {bandwidth:.1f} GB/s.", "",
             f"**{cell['model']}, {cell['dtype']}, batch {batch}{kernel}** "
             f"({facts['parameters'] / 1e6:.1f} "
             f"M parameters, {facts['weight_bytes'] / 2**20:.4g} MiB; prompts of "
             f"{', '.join(map(str, cell['lengths']))} tokens padded to "
             f"{cell['width']}; KV cache {facts['kv_bytes_per_position'] / 2**10:.3g} "
             f"KiB per position; a decode step reads {limit['step_bytes'] / 2**20:.4g} "
             f"MiB: the bound {limit['step_ms']:.3g} ms)", "",
             "| route | tokens/s | ×`generate` | decode step ms | ×bound | prefill ms "
             "| total s | launches / token | rows = `generate`'s | rows = static "
             "loop's | RSS before / peak MiB | total per process (s) |",
             "|---|" + "---:|" * 11]
    generate = cell["routes"].get("generate")
    for route, entry in cell["routes"].items():
        speed = f"×{entry['tokens_per_s'] / generate['tokens_per_s']:.2f}" if generate else "—"
        launches = f"{entry['launches_per_token']:g}" if side_of(route) == "ms_aten" else "—"
        agree = "" if entry["tokens_agree"] else " (processes differ)"
        lines.append(
            f"| {ROUTES[route]} | {entry['tokens_per_s']:.4g} | {speed} | "
            f"{entry['step_ms']:.4g} | ×{entry['step_ms'] / limit['step_ms']:.2f} | "
            f"{entry['prefill_s'] * 1e3:.4g} | {entry['total_s']:.3g} | {launches} | "
            f"{entry['rows_equal_generate']}/{batch}{agree} | "
            f"{number(entry.get('rows_equal_static_loop'), 'd')}/{batch} | "
            f"{entry['rss_before_mib']:.0f} / {entry['peak_mib']:.0f} | "
            f"{', '.join(f'{x:.3g}' for x in entry['per_process_total_s'])} |")
    lines.append(f"\nDecode step: (total - prefill) / {new_tokens - 1}, the mean over the "
                 f"steps; the bound: the step's bytes (the weights once, the KV prefix at the "
                 f"steps' mean position) / {bandwidth:.1f} GB/s.")
    return "\n".join(lines)


def write_markdown(out: Path) -> Path:
    """decode_batch/README.md under `out`, from every cell summary there."""
    return summaries.write_report(
        out / FAMILY,
        "Batched decoding: ms_aten against torch eager, and the memory bound",
        summaries.method(__doc__), section)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the tiny Llama, batches 1 and 2, one process per side (a smoke run)")
    parser.add_argument("--models", nargs="+", choices=list(MODELS))
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--batches", nargs="+", type=int,
                        help=f"batch sizes (default {' '.join(map(str, BATCHES))}; --quick 1 2)")
    parser.add_argument("--routes", nargs="+", choices=list(ROUTES), default=list(ROUTES))
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per route")
    parser.add_argument("--runs", type=int, default=3,
                        help="timed rounds per process (a generation and a one-token one)")
    parser.add_argument("--new-tokens", type=int, help="default 128 (--quick 12)")
    workers.add_report_arguments(parser, FAMILY)
    args = parser.parse_args(argv)
    if workers.report_only(args, write_markdown):
        return {}
    if "static-loop" not in args.routes and "generate" not in args.routes:
        args.routes.append("generate")  # the reference every speed is given against
    args.models = args.models or (["llama-tiny"] if args.quick else list(DEFAULT_MODELS))
    args.batches = args.batches or ([1, 2] if args.quick else list(BATCHES))
    new_tokens = args.new_tokens or (QUICK if args.quick else FULL).new_tokens
    shape_args = ["--new-tokens", str(new_tokens), *(["--quick"] if args.quick else [])]
    processes, runs = (1, 1) if args.quick else (args.processes, args.runs)
    out = args.out or (None if args.quick else workers.RESULTS)
    settings = {"note": args.note, "quick": args.quick, "processes_per_route": processes,
                "runs": runs, "new_tokens": new_tokens}
    bandwidth: dict[str, float] = {}
    written: dict[str, dict] = {}  # this run's cells: rewritten with the end's bandwidth

    def write(name: str) -> None:
        if out is not None:
            summaries.write_cell(out / FAMILY, name, written[name])

    clock: list = [time.time(), os.getloadavg()]  # when the cell being measured began

    def save(model: str, dtype: str, batch: int, cell: dict) -> None:
        meta = {**workers.machine_meta(*clock), **settings}
        for kernel, routes in by_kernel(cell["routes"]).items():
            name = cell_name(model, dtype, batch, kernel)
            written[name] = summary(meta, bandwidth, model, dtype, batch, kernel, cell, routes)
            write(name)
        clock[:] = [time.time(), os.getloadavg()]

    if not args.quick:  # --quick: measured by the torch worker (a 256 MiB copy)
        bandwidth["start"] = measure_bandwidth()
    args.processes, args.runs = processes, runs
    for model in args.models:
        print(f"{model}:", flush=True)
        clock[:] = [time.time(), os.getloadavg()]
        bench_model(model, args, shape_args, bandwidth, save)
    if not args.quick:
        bandwidth["end"] = measure_bandwidth()
    for name, cell in written.items():
        write(name)
        print(f"\n{name}:\n{section(name, cell)}")
    if out is not None:
        print(f"wrote {write_markdown(out)}")
    return written


def measure_bandwidth() -> float:
    """The machine's memory bandwidth, GB/s, from a torch worker's copies."""
    result = workers.run(WORKERS["torch"], ["--bandwidth", str(BANDWIDTH_MIB)])
    return float(result["bandwidth_gb_s"])


if __name__ == "__main__":
    main()
