"""Smoke test of the benchmark harness: each family's driver (`python -m benchmarks.ops.run`,
`benchmarks.models.run`, `benchmarks.dynamic.run`, `benchmarks.decode.run`,
`benchmarks.compiled.run`, `benchmarks.decode_batch.run`) runs with --quick
and writes its results.

No timing is asserted: the numbers depend on the machine and its load.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 300  # the quick run takes well under a minute; this only stops a hang


@pytest.mark.slow
def test_quick_benchmark_writes_table_json_and_plot(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.ops.run", "--quick", "--out",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIME_LIMIT_S)
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


def test_quick_model_benchmark_checks_every_route_and_counts_launches(tmp_path: Path) -> None:
    """Every route of tiny GPT-2 runs, each worker in its own process, is checked against torch
    (a wrong result fails the worker, hence the run), and launches what it should: one kernel
    per forward, two per forward+backward, so the backward is not pruned."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.models.run", "--quick",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    row = json.loads((tmp_path / "models.json").read_text())["models"]["gpt2-tiny"]
    launches = {route: entry["launches"] for route, entry in row["ms_aten"].items()}
    assert launches["GRAPH forward cell(x)"] == launches["PYNATIVE forward cell(x)"] == 1
    assert launches["GRAPH forward+backward"] == launches["PYNATIVE forward+backward"] == 2
    assert launches["GRAPH forward+backward, recompute"] == 2
    assert launches["GRAPH step nn.Adam"] == 2
    assert launches["GRAPH step ms_aten.optim.Adam"] == 3  # the update is one more launch
    assert all(entry["ms"] > 0 for side in ("torch", "ms_aten") for entry in row[side].values())
    assert row["torch"]["forward"]["per_process_ms"]  # the torch side ran, apart


def test_quick_dynamic_benchmark_checks_both_workloads_on_every_route(tmp_path: Path) -> None:
    """Decoding and training on every ms_aten route (both modes, dynamic and static), each in
    its own process beside torch eager's: the workers' tokens equal torch's and their losses
    follow torch's (the run fails otherwise), and every item launches what it should: one
    kernel per decoded token, three per training step (forward, backward, the Adam update)."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.dynamic.run", "--quick",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    workloads = json.loads((tmp_path / "dynamic.json").read_text())["workloads"]
    for workload, launches in (("decode", 1), ("train", 3)):
        row = workloads[workload]
        routes = [f"{mode}-{shapes}" for mode in ("graph", "pynative")
                  for shapes in ("dynamic", "static")]
        assert all(row[route]["launches_per_item"] == launches for route in routes)
        assert all(row[route]["steady_ms"] > 0 for route in [*routes, "torch"])
    assert "| ms_aten GRAPH, dynamic |" in (tmp_path / "dynamic.md").read_text()


def test_quick_decode_benchmark_makes_torch_s_tokens_on_every_route(tmp_path: Path) -> None:
    """Every decoding route of tiny GPT-2 (torch's static-cache loop and model.generate;
    ms_aten.generate, the GRAPH and PYNATIVE step loops) makes model.generate's tokens (the run
    fails otherwise), one kernel launch per token on the ms_aten routes; the step loops report
    the prefill and per-token times, the whole-loop graph only its total."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.decode.run", "--quick",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    row = json.loads((tmp_path / "decode.json").read_text())["models"]["gpt2-tiny"]
    routes = row["routes"]
    assert set(routes) == {"static-loop", "generate", "graph-generate", "graph-loop",
                           "pynative-loop"}
    assert len(row["reference"]) == row["workload"]["new_tokens"]
    assert len(set(row["reference"])) > 3  # the token check can tell a wrong cache
    for route in ("graph-generate", "graph-loop", "pynative-loop"):
        assert routes[route]["launches_per_token"] == 1
    for route in ("static-loop", "generate", "graph-loop", "pynative-loop"):
        assert set(routes[route]["per_token_ms"]) == {"12", "26"}
        assert routes[route]["prefill_ms"] > 0 and routes[route]["decode_tokens_per_s"] > 0
    assert "prefill_ms" not in routes["graph-generate"]
    assert all(entry["total_s"] > 0 and entry["peak_mib"] >= entry["rss_before_mib"] > 0
               for entry in routes.values())
    assert "| ms_aten GRAPH, step loop |" in (tmp_path / "decode.md").read_text()


def test_quick_compiled_benchmark_runs_both_compilers_and_reports_compile_times(
        tmp_path: Path) -> None:
    """torch.compile and ms_aten's compile= on tiny GPT-2's forward, ms_aten's on its training
    step, each in its own process with cold caches: the ms_aten routes are checked against
    torch eager (a wrong result fails the run), launch one kernel per forward and three per
    step, and both sides report a compile time."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.compiled.run", "--quick",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=2 * TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    row = json.loads((tmp_path / "compiled.json").read_text())["models"]["gpt2-tiny"]
    assert row["forward"]["ms_aten compiled"]["launches"] == 1
    assert row["training step"]["ms_aten compiled"]["launches"] == 3
    assert all(entry["nodes"] == 1 for entry in (row["forward"]["ms_aten compiled"],
                                                 row["training step"]["ms_aten compiled"]))
    for entries in row.values():
        for entry in entries.values():
            assert entry["ms"] > 0 and entry["compile_s"] > 0
    assert "| gpt2-tiny | forward |" in (tmp_path / "compiled.md").read_text()


def test_quick_batched_decode_benchmark_runs_every_route_beside_the_bound(
        tmp_path: Path) -> None:
    """A left-padded bfloat16 batch of two prompts of the tiny Llama on every route (torch's
    model.generate and static-cache loop, ms_aten.generate in both modes, with either linear
    kernel): ms_aten's tokens equal the static-cache loop's (the same kernels) and
    model.generate's, one kernel launch per token, and the decode step is reported beside the
    bound of reading the weights and the KV prefix: 2 x layers x batch x kv heads x head dim x
    2 bytes per position. (The one test of a bfloat16 model's ms_aten.generate, in both modes:
    GRAPH mode once failed on MindSpore's CPU slice, which has no bfloat16 kernel.)"""
    done = subprocess.run([sys.executable, "-m", "benchmarks.decode_batch.run", "--quick",
                           "--dtypes", "bfloat16", "--batches", "2", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    data = json.loads((tmp_path / "decode_batch.json").read_text())
    cell = data["models"]["llama-tiny"]["cells"]["bfloat16/2"]
    assert sorted(cell["lengths"]) == [6, 11] and cell["width"] == 11  # mixed, left-padded
    assert cell["facts"]["kv_bytes_per_position"] == 2 * 2 * 2 * 2 * 16 * 2
    assert cell["facts"]["weight_bytes"] == 2 * cell["facts"]["parameters"]
    routes = cell["routes"]
    ms_aten_routes = ("graph-generate", "pynative-generate", "graph-onednn", "pynative-onednn")
    assert set(routes) == {"generate", "static-loop", *ms_aten_routes}
    assert len(set(cell["reference"][1])) > 3  # the token check can tell a wrong mask
    for route in ms_aten_routes:
        assert routes[route]["launches_per_token"] == 1
        assert routes[route]["rows_equal_static_loop"] == routes[route]["rows_equal_generate"] == 2
    assert all(entry["step_ms"] > 0 and entry["tokens_per_s"] > 0 for entry in routes.values())
    assert data["bandwidth_gb_s"]["start"] > 0
    assert "| ms_aten.generate, GRAPH (one graph) |" in (tmp_path / "decode_batch.md").read_text()
