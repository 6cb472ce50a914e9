"""Compiled programs: ms_aten.module(compile=...) beside the interpreted program, torch eager and
torch.compile, with compile times; each route timed alone in fresh processes.

    .venv/bin/python -m benchmarks.compiled.run   # GPT-2 tiny, medium and small, BERT medium
    .venv/bin/python -m benchmarks.compiled.run --quick --out /tmp/c   # tiny GPT-2 (CI smoke)

Method:
- The models benchmark's models, workers and checks (benchmarks/models): torch in
  models/worker_torch.py, a process that never imports MindSpore, as eager and as
  torch.compile(model) (TorchInductor, torch's defaults); ms_aten in models/worker_ms_aten.py as
  the interpreted program and compiled (--compile: the eval-mode module for inference, the
  backward too for the training step). Every ms_aten route is checked against torch eager's
  results before it is timed (logits; one Adam step's update), and reports its kernel launches
  per call.
- Three routes: the forward (torch under no_grad, ms_aten's GRAPH `cell(x)`) and a training step
  (forward, backward, Adam: torch.optim.Adam, torch's default implementation; ms_aten GRAPH with
  ms_aten.optim.Adam, a jitted value_and_grad and the update, three launches), with MindSpore's
  loss (LossCell) between the launches, and with the loss in the program (the model and ATen's
  loss captured as one module, tests/models.WithLoss; ms_aten's ways only, against the training
  step's torch figures).
- Each (route, side, compilation) in --processes fresh processes (default 3), torch's and
  ms_aten's alternating, the order reversed every other round; the median over processes.
- Compile times, cold: in the first round every compiled job starts with empty caches of its own
  (TORCHINDUCTOR_CACHE_DIR for both sides, and ms_aten's compile cache): torch.compile's first
  call of the route (tracing and compiling; the step's compiles its forward and backward), and
  ms_aten.module's capture with compile= (torch.export, the joint trace and partition for
  training, AOTInductor). Later rounds reuse those caches: their first calls are warm.
- ATen's default threads on both sides (one per core).
--quick: tiny GPT-2, one process per job: torch.compile and ms_aten's compile on the forward,
ms_aten's on the training step; a check that they run, are right and launch what they should,
not a measurement.
Writes a summary per model, benchmarks/results/compiled/<model>.json, and rewrites
compiled/README.md from every one there (--out DIR elsewhere; --quick only with --out).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import summaries, workers
from benchmarks.models.workloads import CONFIGS, TORCH_FORWARD, TORCH_STEP

WORKERS = {"torch": "benchmarks.models.worker_torch", "ms_aten": "benchmarks.models.worker_ms_aten"}
DEFAULT_MODELS = ("gpt2-tiny", "gpt2-medium", "bert-medium", "gpt2-small")
FAMILY = "compiled"
# What is timed: the torch route, and the ms_aten route and compilation compared with it.
ROUTES = {"forward": (TORCH_FORWARD, "GRAPH forward cell(x)", "inference"),
          "training step": (TORCH_STEP, "GRAPH step ms_aten.optim.Adam", "training"),
          "training step, loss in the program": (
              TORCH_STEP, "GRAPH step ms_aten.optim.Adam, loss in the program", "training")}
# A route whose torch side is another route's (the same torch step): only ms_aten's ways run,
# and its ratios are to that route's torch figures.
TORCH_OF = {"training step, loss in the program": "training step"}
# The four ways each route runs: (worker side, --compile).
WAYS = {"torch eager": ("torch", "none"), "torch.compile": ("torch", "torch.compile"),
        "ms_aten interpreted": ("ms_aten", "none"), "ms_aten compiled": ("ms_aten", "compiled")}
# --quick: both compilers on the forward; ms_aten's alone on the training step (torch.compile's
# training compile is torch's own, and the slowest job of the smoke run).
QUICK_WAYS = {"forward": ("torch.compile", "ms_aten compiled"),
              "training step": ("ms_aten compiled",), "training step, loss in the program": ()}


def job_arguments(what: str, way: str) -> tuple[str, str, str]:
    """(side, worker route, --compile) of one job."""
    torch_route, ms_route, compiled = ROUTES[what]
    side, compile_kind = WAYS[way]
    if side == "torch":
        return side, torch_route, compile_kind
    return side, ms_route, compiled if compile_kind == "compiled" else "none"


def bench_model(model: str, processes: int, ways: dict[str, tuple[str, ...]], extra: list[str],
                caches: Path) -> dict:
    jobs = [(WAYS[way][0], what, way) for what in ROUTES for way in ways[what]]
    runs: dict[tuple[str, str], list[dict]] = {(what, way): [] for _, what, way in jobs}
    seen: set[tuple[str, str]] = set()
    for _, what, way in workers.schedule(jobs, processes):
        side, route, compile_kind = job_arguments(what, way)
        arguments = ["--model", model, "--route", route, "--compile", compile_kind, *extra]
        env = None
        if compile_kind != "none":
            # One cache folder per job: empty at its first process (a cold compile), warm after.
            cache = caches / model / f"{what}-{way}".replace(" ", "_")
            cache.mkdir(parents=True, exist_ok=True)
            env = {"TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor")}
            if side == "ms_aten":
                arguments += ["--cache-dir", str(cache / "ms_aten")]
        started = time.perf_counter()
        result = workers.run(WORKERS[side], arguments, env)
        result["cold"] = (what, way) not in seen
        seen.add((what, way))
        runs[(what, way)].append(result)
        print(f"  {model} {what:13} {way:19} {result['routes'][route]['ms']:9.3f} ms "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    workers.check_fingerprints(model, {r["fingerprint"] for results in runs.values()
                                       for r in results})
    row: dict = {}
    for (what, way), results in runs.items():
        side, route, _ = job_arguments(what, way)
        figures = [r["routes"][route]["ms"] for r in results]
        cold = next(r for r in results if r["cold"])
        entry = {"ms": statistics.median(figures), "per_process_ms": figures,
                 "compile_s": compile_seconds(cold, side, route, way)}
        if side == "ms_aten":
            entry["launches"] = cold["launches"][route]
            entry["nodes"] = cold["nodes"]
        row.setdefault(what, {})[way] = entry
    return row


def compile_seconds(result: dict, side: str, route: str, way: str) -> float | None:
    """A cold process's compile time: torch.compile's first call, ms_aten's capture."""
    if way == "torch.compile":
        return result["first_call_s"][route]
    if side == "ms_aten" and result["compiled"] is not None:
        return result["capture_s"]
    return None


def _figure(entry: dict | None, eager_ms: float | None) -> str:
    """A way's median ms, with its ratio to torch eager's when that is given."""
    if entry is None:
        return "–"
    return f"{entry['ms']:.3g}" + (f" (×{entry['ms'] / eager_ms:.2f})" if eager_ms else "")


def report(rows: dict[str, dict]) -> str:
    lines = ["Median ms per call over the processes; ratios to torch eager, and ms_aten compiled "
             "to torch.compile. Compile: seconds, cold caches.", "",
             "| model | route | torch eager | torch.compile | ms_aten interpreted | "
             "ms_aten compiled | compiled / torch.compile | compile s: torch.compile, ms_aten "
             "| launches / call (interpreted, compiled) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for model, row in rows.items():
        for what, entries in row.items():
            torch_entries = row.get(TORCH_OF.get(what, what), {})
            eager = torch_entries.get("torch eager", {}).get("ms")
            cells = {way: _figure(entries.get(way), None if way == "torch eager" else eager)
                     for way in WAYS}
            compiled, tc = entries.get("ms_aten compiled"), torch_entries.get("torch.compile")
            versus = f"×{compiled['ms'] / tc['ms']:.2f}" if compiled and tc else "–"
            compile_s = ", ".join(f"{e['compile_s']:.1f}" if e and e["compile_s"] else "–"
                                  for e in (entries.get("torch.compile"), compiled))
            launches = ", ".join(str(entries[w]["launches"]) if w in entries else "–"
                                 for w in ("ms_aten interpreted", "ms_aten compiled"))
            lines.append(f"| {model} | {what} | {' | '.join(cells.values())} | {versus} | "
                         f"{compile_s} | {launches} |")
    lines += ["", "Per process (ms):", "", "| model | route | way | per process |",
              "|---|---|---|---|"]
    for model, row in rows.items():
        for what, entries in row.items():
            for way, entry in entries.items():
                lines.append(f"| {model} | {what} | {way} | "
                             f"{', '.join(f'{x:.3g}' for x in entry['per_process_ms'])} |")
    return "\n".join(lines)


def section(name: str, cell: dict) -> str:
    """A model's part of the report: its run and its routes' figures."""
    meta = cell["meta"]
    return (summaries.machine_lines(meta)
            + f"- {meta['processes_per_route']} processes per route\n\n"
            + report({cell["model"]: cell["routes"]}))


def write_markdown(out: Path) -> Path:
    """compiled/README.md under `out`, from every model's summary there."""
    return summaries.write_report(
        out / FAMILY,
        "Compiled programs: ms_aten compile= against torch eager and torch.compile",
        summaries.method(__doc__), section)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny GPT-2, the compiled jobs in one process each (a smoke run)")
    parser.add_argument("--models", nargs="*", choices=list(CONFIGS))
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per route")
    workers.add_report_arguments(parser, FAMILY)
    args = parser.parse_args(argv)
    if workers.report_only(args, write_markdown):
        return {}
    if args.quick and args.out is None:
        raise SystemExit("--quick writes only with --out (its figures are no measurement)")
    names = args.models or (["gpt2-tiny"] if args.quick else list(DEFAULT_MODELS))
    repeats, target_s = (2, 0.02) if args.quick else (5, 0.2)
    extra = ["--repeats", str(repeats), "--target-s", str(target_s)]
    ways = QUICK_WAYS if args.quick else {
        what: tuple(w for w in WAYS if what not in TORCH_OF or WAYS[w][0] == "ms_aten")
        for what in ROUTES}
    processes = 1 if args.quick else args.processes
    out = args.out or workers.RESULTS
    rows = {}
    with tempfile.TemporaryDirectory(prefix="ms_aten_bench_caches_") as caches:
        for name in names:
            started, load_start = time.time(), os.getloadavg()
            rows[name] = bench_model(name, processes, ways, extra, Path(caches))
            meta = {**workers.machine_meta(started, load_start), "note": args.note,
                    "processes_per_route": processes, "quick": args.quick}
            path = summaries.write_cell(out / FAMILY, name,
                                        {"meta": meta, "model": name, "routes": rows[name]})
            print(f"wrote {path}", flush=True)
    print(report(rows))
    print(f"wrote {write_markdown(out)}")
    return rows


if __name__ == "__main__":
    main()
