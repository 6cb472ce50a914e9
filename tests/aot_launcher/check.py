"""Runs the AOT launcher over the cases make_cases.py wrote and prints one line per check (PASS or
FAIL, with the numbers); exit status 1 when one fails. Torch only:

    cd tests && python -m aot_launcher.check --device cuda --launcher L --library LIB DIR

It leaves the plan (plan.txt), the launcher's files and its output (launcher.txt) in DIR.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from .cases import Outcome, judge, run_launcher, write_plan

LAUNCHER_OUTPUT = "launcher.txt"  # what the launcher printed, kept beside its files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="make_cases.py's folder")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--launcher", type=Path, required=True, help="the built launcher.cpp")
    parser.add_argument("--library", type=Path, required=True, help="libms_aten.so")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    planned = write_plan(args.folder, device)
    result = run_launcher(args.launcher, args.library, args.folder, device)
    (args.folder / LAUNCHER_OUTPUT).write_text(result.stdout + result.stderr)
    outcomes = judge(planned, result.stdout, args.folder, device)
    if result.returncode != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        outcomes.append(Outcome("launcher", False, f"exit status {result.returncode}: {tail}"))
    for outcome in outcomes:
        print(outcome.line())
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
