"""What the benchmark families share: starting a worker in a fresh process and reading its
result (the one stdout line that starts with RESULT, JSON after it), the order of the jobs, and
the record of the machine a run used. Imports neither torch nor MindSpore."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: workers run as modules from here
RESULTS = ROOT / "benchmarks" / "results"  # a folder per family (common/summaries.py)
RESULT = "RESULT "
TIMEOUT_S = 3600


def emit(result: dict) -> None:
    """A worker's last word: its result, as the line run() reads."""
    print(RESULT + json.dumps(result), flush=True)


def run(module: str, arguments: list[str], env: dict[str, str] | None = None,
        first: str | None = None) -> dict:
    """`python -m module arguments` in a fresh Python process started in the repository root
    (`env` added to this one's environment, and GLOG_v=3: MindSpore logs errors only); its
    result. `first`: a package the process imports before the module's own imports (ms_aten
    before torch, to time either import order). A failing worker stops the run with its
    output."""
    start = ["-m", module] if first is None else [
        "-c", f"import {first}, runpy; runpy.run_module({module!r}, run_name='__main__', "
              f"alter_sys=True)"]
    done = subprocess.run([sys.executable, *start, *arguments], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=dict(os.environ, GLOG_v="3", **(env or {})))
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{module} {' '.join(arguments)} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(lines[-1][len(RESULT):])


def add_report_arguments(parser: argparse.ArgumentParser, family: str) -> None:
    """--note, --out and --report-only, as the drivers take them."""
    parser.add_argument("--note", default="", help="a line for the header: what loads the machine")
    parser.add_argument("--out", type=Path, help=f"folder for {family}/ (its cell summaries and "
                                                 f"README.md; default benchmarks/results)")
    parser.add_argument("--report-only", action="store_true",
                        help=f"only rewrite {family}/README.md from the cell summaries there")


def report_only(args: argparse.Namespace, write_markdown: Callable[[Path], Path]) -> bool:
    """With --report-only: the family's report rewritten from the cells in its folder (under
    --out, else benchmarks/results), and True; else False (run)."""
    if not args.report_only:
        return False
    print(f"wrote {write_markdown(args.out or RESULTS)}")
    return True


def check_fingerprints(model: str, fingerprints: set[float]) -> None:
    """Every process of `model` reported the same fingerprint of torch's forward (the same
    weights and data), to within rounding."""
    if max(fingerprints) - min(fingerprints) > 1e-6 * max(fingerprints):
        raise RuntimeError(f"{model}: the processes ran different weights or data "
                           f"(torch's forward fingerprints {sorted(fingerprints)})")


Job = tuple[str, ...]  # (side, what it runs...): side "torch", or another


def schedule(jobs: list[Job], processes: int) -> list[Job]:
    """Every job once per round; torch's and the other side's alternate, and every other round
    runs backwards, so that a drift in the machine's load falls on both sides alike."""
    torch_jobs = [job for job in jobs if job[0] == "torch"]
    other_jobs = [job for job in jobs if job[0] != "torch"]
    one_round: list[Job] = []
    for i in range(max(len(torch_jobs), len(other_jobs))):
        one_round += torch_jobs[i:i + 1] + other_jobs[i:i + 1]
    return [job for r in range(processes) for job in (one_round if r % 2 == 0
                                                       else one_round[::-1])]


def machine_meta(started: float, load_start: tuple[float, float, float]) -> dict:
    """When and where a benchmark ran, and the machine's load around it (`started`: its
    time.time() at the start, `load_start`: os.getloadavg() then)."""
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "host": f"{platform.platform()}, {os.cpu_count()} CPUs",
            "loadavg_start": [round(x, 2) for x in load_start],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "wall_s": round(time.time() - started)}

