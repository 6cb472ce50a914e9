"""Data-parallel training under msrun: scripts/run_distributed.sh runs examples/data_parallel.py
in 2 CPU workers; the example checks that both ranks end with identical weights, equal within
its stated tolerance to one process trained on the full batches, and the same for a torch model
captured by ms_aten.module with opaque regions (a tensor hook, GaussianNLLLoss), against torch
eager on the full batches, in GRAPH and PYNATIVE mode; and prints OK."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 600  # two workers plus the single-process reference take about a minute


@pytest.mark.slow
def test_two_workers_train_like_one_process():
    # The workers msrun starts run this interpreter (with this PYTHONPATH, if any).
    env = {**os.environ, "MS_ATEN_PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "run_distributed.sh")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=TIME_LIMIT_S)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert "OK: 2 ranks' weights identical" in output
    assert "with two opaque regions, 5 steps in GRAPH and PYNATIVE mode" in output
