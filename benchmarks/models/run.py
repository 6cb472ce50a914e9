"""Whole models: ms_aten.module against torch eager, each route timed alone in fresh processes.

    .venv/bin/python -m benchmarks.models.run   # GPT-2 tiny, medium, small; BERT medium, base
    .venv/bin/python -m benchmarks.models.run --quick         # tiny GPT-2, a smoke run (CI)
    .venv/bin/python -m benchmarks.models.run --models gpt2-tiny --processes 5 \\
        --note "under load: two other engineers' builds"

Method:
- torch eager runs in models/worker_torch.py, a process that never imports MindSpore (it checks);
  ms_aten in models/worker_ms_aten.py, a process of its own. MindSpore's runtime threads slow
  torch eager down several times when both share a process.
- One route per process: routes timed in turns in one process slow each other down (a
  forward+backward timed between forwards took ten times as long), and users run one loop.
  Each route runs in --processes fresh processes (default 3), torch's and ms_aten's
  alternating, the order reversed every other round; a process's figure is the median of its
  samples (timing.measure), the route's figure the median over its processes.
- Before timing, the ms_aten worker checks its route against torch eager in its own process:
  the logits, the loss and every gradient, the weights after one Adam step. Both workers report
  a fingerprint of torch's forward, so all processes of a model provably ran the same weights
  and data.
- Every ms_aten call ends with MindSpore's executor sync; the forward+backward returns the loss
  and every gradient (returning only the loss lets MindSpore prune the backward), and each
  route's ms_aten kernel launches per call are reported beside its time.
- ATen's default threads on both sides (one per core), unless --threads.
--quick times every route of tiny GPT-2 in one process per side, in turns: a check that every
route runs and launches what it should, not a measurement.
Writes a summary per cell, benchmarks/results/models/<model>_<routes>.json: the forward routes
(forward) and the training ones (training), each with the torch routes they are compared with,
and a suffix for a configuration other than the default (threads<n>, the --ms-env keys,
ms_aten_first); and rewrites models/README.md from every cell there (--out DIR elsewhere;
--quick only with --out).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from benchmarks.common import summaries, workers
from benchmarks.models.workloads import (
    CONFIGS,
    MS_ATEN_ROUTES,
    TORCH_FORWARD,
    TORCH_ROUTES,
    TORCH_STEP,
    TORCH_STEP_FUSED,
)

WORKERS = {"torch": "benchmarks.models.worker_torch", "ms_aten": "benchmarks.models.worker_ms_aten"}
DEFAULT_MODELS = ("gpt2-tiny", "gpt2-medium", "bert-medium", "gpt2-small", "bert-base")
FAMILY = "models"


def group_of(route: str) -> str:
    """The cell of an ms_aten route: "forward" beside torch's forward, else "training"."""
    return "forward" if MS_ATEN_ROUTES[route] == TORCH_FORWARD else "training"


def run_worker(side: str, model: str, route: str | None, extra: list[str],
               env: dict[str, str] | None = None, first: str | None = None) -> dict:
    """One fresh worker process for `model` (and `route`, else every route); its result."""
    arguments = ["--model", model, *extra] + (["--route", route] if route is not None else [])
    return workers.run(WORKERS[side], arguments, env, first)


def parse_env(pairs: list[str]) -> dict[str, str]:
    """--ms-env KEY=VALUE ... as a dict (a malformed pair is an argparse-style error)."""
    if any("=" not in pair for pair in pairs):
        raise SystemExit(f"--ms-env takes KEY=VALUE pairs, got {pairs}")
    return dict(pair.split("=", 1) for pair in pairs)


def bench_model(model: str, routes: list[str], processes: int, extra: list[str], quick: bool,
                ms_env: dict[str, str], first: str | None = None) -> dict:
    """The ms_aten `routes` of `model` and the torch routes they are compared with (and torch's
    fused Adam step beside its default one): per-process figures, then their median and the
    ratio to torch; `ms_env` is added to the ms_aten workers' environment, which import `first`
    before anything else."""
    wanted = {MS_ATEN_ROUTES[r] for r in routes}
    if TORCH_STEP in wanted:
        wanted.add(TORCH_STEP_FUSED)
    jobs = [("torch", r) for r in TORCH_ROUTES if r in wanted] + [("ms_aten", r) for r in routes]
    runs: dict[tuple[str, str], list[dict]] = {job: [] for job in jobs}
    if quick:  # every route of a side in one process, in turns
        for side in ("torch", "ms_aten"):
            result = run_worker(side, model, None, extra, *ms_aten_only(side, ms_env, first))
            for route in result["routes"]:
                if (side, route) in runs:
                    runs[(side, route)].append(result)
    else:
        for side, route in workers.schedule(jobs, processes):
            started = time.perf_counter()
            result = run_worker(side, model, route, extra, *ms_aten_only(side, ms_env, first))
            runs[(side, route)].append(result)
            print(f"  {model} {side:7} {route:28} {result['routes'][route]['ms']:9.3f} ms "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
    workers.check_fingerprints(model, {r["fingerprint"] for results in runs.values()
                                       for r in results})
    row: dict = {"nodes": next(r["nodes"] for r in runs[jobs[-1]]), "torch": {}, "ms_aten": {}}
    for (side, route), results in runs.items():
        figures = [r["routes"][route]["ms"] for r in results]
        entry = {"ms": statistics.median(figures), "per_process_ms": figures}
        if side == "ms_aten":
            launches = {r["launches"][route] for r in results}
            entry["launches"] = launches.pop() if len(launches) == 1 else sorted(launches)
            entry["vs"] = MS_ATEN_ROUTES[route]
        row[side][route] = entry
    for entry in row["ms_aten"].values():
        entry["ratio"] = entry["ms"] / row["torch"][entry["vs"]]["ms"]
    row["meta"] = {side: runs[(side, route)][0]["meta"] for side, route in jobs[:1] + jobs[-1:]}
    return row


def ms_aten_only(side: str, ms_env: dict[str, str], first: str | None
                 ) -> tuple[dict[str, str] | None, str | None]:
    """The environment and first import of a worker: the ms_aten side's alone."""
    return (ms_env, first) if side == "ms_aten" else (None, None)


def ratio_cell(entry: dict, torch_ms: float) -> str:
    return f"×{entry['ratio']:.2f} ({entry['ms']:.3g} vs {torch_ms:.3g} ms)"


SUMMARY = ("GRAPH forward cell(x)", "GRAPH forward+backward",
           "GRAPH forward+backward, loss in the program", "GRAPH step ms_aten.optim.Adam",
           "GRAPH step ms_aten.optim.Adam, loss in the program", "GRAPH step nn.Adam",
           "PYNATIVE forward cell(x)", "PYNATIVE step ms_aten.optim.Adam")


def best_ratio(entry: dict, ref: dict) -> float:
    """The fastest process's figure against torch's fastest: on a loaded machine a process can
    run several times slower throughout (both sides), and with three processes two such can
    carry the median; the best of each side is the steadier comparison there."""
    return min(entry["per_process_ms"]) / min(ref["per_process_ms"])


def report(rows: dict[str, dict]) -> str:
    summary = [r for r in SUMMARY if all(r in row["ms_aten"] for row in rows.values())]
    lines = ["Median of the processes (the best process's ratio in brackets):", "",
             "| " + " | ".join(["model", *summary]) + " |", "|---|" + "---:|" * len(summary)]
    for model, row in rows.items():
        cells = [f"{ratio_cell(row['ms_aten'][r], row['torch'][MS_ATEN_ROUTES[r]]['ms'])} "
                 f"[×{best_ratio(row['ms_aten'][r], row['torch'][MS_ATEN_ROUTES[r]]):.2f}]"
                 for r in summary]
        lines.append(f"| {model} ({row['nodes']} ATen calls) | " + " | ".join(cells) + " |")
    for model, row in rows.items():
        lines += ["", f"**{model}**", "",
                  "| ms_aten route | ms | launches / call | torch route | torch ms | ratio | "
                  "best ratio | ms_aten per process | torch per process |",
                  "|---|---:|---:|---|---:|---:|---:|---|---|"]
        for route, entry in row["ms_aten"].items():
            ref = row["torch"][entry["vs"]]
            lines.append(
                f"| {route} | {entry['ms']:.3f} | {entry['launches']} | {entry['vs']} | "
                f"{ref['ms']:.3f} | ×{entry['ratio']:.2f} | ×{best_ratio(entry, ref):.2f} | "
                f"{', '.join(f'{x:.3g}' for x in entry['per_process_ms'])} | "
                f"{', '.join(f'{x:.3g}' for x in ref['per_process_ms'])} |")
        if TORCH_STEP_FUSED in row["torch"]:
            fused = row["torch"][TORCH_STEP_FUSED]
            lines.append(f"| (torch's step with Adam(fused=True)) | | | | {fused['ms']:.3f} | | "
                         f"| | {', '.join(f'{x:.3g}' for x in fused['per_process_ms'])} |")
    return "\n".join(lines)


def by_group(row: dict) -> dict[str, dict]:
    """A model's row split into its cells: each group's ms_aten routes (group_of) with the
    torch routes they are compared with (and torch's fused Adam step beside its default one)."""
    cells = {}
    for group in dict.fromkeys(group_of(route) for route in row["ms_aten"]):
        ours = {r: e for r, e in row["ms_aten"].items() if group_of(r) == group}
        wanted = {e["vs"] for e in ours.values()}
        if TORCH_STEP in wanted:
            wanted.add(TORCH_STEP_FUSED)
        cells[group] = {"nodes": row["nodes"],
                        "torch": {r: e for r, e in row["torch"].items() if r in wanted},
                        "ms_aten": ours, "workers": row["meta"]}
    return cells


def cell_name(model: str, group: str, meta: dict) -> str:
    """gpt2-small_forward; a configuration other than the default adds threads<n>, the
    --ms-env keys and ms_aten_first."""
    return "_".join([model, group] + ([f"threads{meta['threads']}"] if meta["threads"] else [])
                    + list(meta["ms_env"])
                    + (["ms_aten_first"] if meta.get("import_first") == "ms_aten" else []))


def section(name: str, cell: dict) -> str:
    """A cell's part of the report: its run, its settings and its routes' figures."""
    meta, samples = cell["meta"], cell["meta"]["samples"]
    return (summaries.machine_lines(meta)
            + f"- {meta['processes_per_route']} processes per route; per process the median of "
              f"{samples['repeats']} samples of at least {samples['target_s']} s\n"
            + (f"- the ms_aten workers ran with {meta['ms_env']}\n" if meta["ms_env"] else "")
            + (f"- ATen threads on both sides: {meta['threads']}\n" if meta["threads"] else "")
            + f"- import order of the ms_aten workers: {meta.get('import_first', 'torch')} first"
              f"\n\n" + report({cell["model"]: cell}))


def write_markdown(out: Path) -> Path:
    """models/README.md under `out`, from every cell summary there."""
    return summaries.write_report(out / FAMILY,
                                  "Whole models: ms_aten against torch eager",
                                  summaries.method(__doc__), section)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny GPT-2, every route in one process per side (a smoke run)")
    parser.add_argument("--models", nargs="*", choices=list(CONFIGS))
    parser.add_argument("--routes", nargs="*", choices=list(MS_ATEN_ROUTES),
                        default=list(MS_ATEN_ROUTES), help="ms_aten routes (default: all)")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per route")
    parser.add_argument("--threads", type=int, default=0,
                        help="ATen threads on both sides (0: ATen's default)")
    workers.add_report_arguments(parser, FAMILY)
    parser.add_argument("--ms-env", nargs="*", default=[], metavar="KEY=VALUE",
                        help="environment for the ms_aten workers only, e.g. "
                             "MS_DEV_HOST_BLOCKING_RUN=1 (a what-if; its cells are named "
                             "<model>_<routes>_<KEY>)")
    parser.add_argument("--import-first", choices=["torch", "ms_aten"], default="torch",
                        help="what the ms_aten workers import first (cells of ms_aten first "
                             "are named <model>_<routes>_ms_aten_first)")
    args = parser.parse_args(argv)
    if workers.report_only(args, write_markdown):
        return {}
    names = args.models or (["gpt2-tiny"] if args.quick else list(DEFAULT_MODELS))
    repeats, target_s = (2, 0.02) if args.quick else (5, 0.2)
    extra = ["--repeats", str(repeats), "--target-s", str(target_s), "--threads",
             str(args.threads)]
    ms_env = parse_env(args.ms_env)
    first = "ms_aten" if args.import_first == "ms_aten" else None  # the workers import torch first
    settings = {"note": args.note, "quick": args.quick,
                "processes_per_route": 1 if args.quick else args.processes,
                "samples": {"repeats": repeats, "target_s": target_s}, "threads": args.threads,
                "ms_env": ms_env, "import_first": args.import_first}
    out = args.out or (None if args.quick else workers.RESULTS)
    rows, written = {}, {}
    for name in names:
        print(f"{name}:", flush=True)
        started, load_start = time.time(), os.getloadavg()
        rows[name] = bench_model(name, args.routes, 1 if args.quick else args.processes, extra,
                                 args.quick, ms_env, first)
        meta = {**workers.machine_meta(started, load_start), **settings}
        for group, part in by_group(rows[name]).items():
            cell = cell_name(name, group, meta)
            written[cell] = {"meta": meta, "model": name, **part}
            if out is not None:
                summaries.write_cell(out / FAMILY, cell, written[cell])
    print(report(rows))
    if out is not None:
        print(f"wrote {write_markdown(out)}")
    return written


if __name__ == "__main__":
    main()
