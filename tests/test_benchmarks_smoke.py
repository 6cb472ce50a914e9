"""Smoke test of the benchmark harness: `benchmarks/run.py --quick` runs and writes its results.

No timing is asserted: the numbers depend on the machine and its load.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "run.py"
TIME_LIMIT_S = 300  # the quick run takes well under a minute; this only stops a hang


@pytest.mark.slow
def test_quick_benchmark_writes_table_json_and_plot(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(RUN), "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"

    table = (tmp_path / "results.md").read_text()
    assert "| op | size |" in table
    assert "Where ms_aten beats MindSpore's native CPU kernel" in table

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["meta"]["quick"] is True
    assert results["cases"], "no op was benchmarked"
    for case in results["cases"]:
        assert case["aten_out_us"] > 0
        assert {route["status"] for route in case["routes"]} <= {"ok", "wrong", "n/a"}

    plot = tmp_path / "speed.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_model_benchmark_checks_results_and_counts_one_launch() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_models.py"),
                           "--quick"], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    rows = [line for line in done.stdout.splitlines() if line.startswith("| gpt2-tiny")]
    assert len(rows) == 1 and rows[0].split("|")[3].strip() == "1"  # launches per forward
