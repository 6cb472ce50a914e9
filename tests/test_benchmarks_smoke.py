"""Smoke test of the benchmark harness: each family's driver (`python -m benchmarks.ops.run`,
`benchmarks.models.run`, `benchmarks.dynamic.run`, `benchmarks.decode.run`,
`benchmarks.compiled.run`, `benchmarks.decode_batch.run`, `benchmarks.losses.run`,
`benchmarks.opaque.run`) runs with
--quick and writes its results: a summary per cell, <family>/<cell>.json, and the family's report,
<family>/README.md.

No timing is asserted: the numbers depend on the machine and its load.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 300  # the quick run takes well under a minute; this only stops a hang
SHA256 = re.compile(r"[0-9a-f]{64}")


def cells(folder: Path) -> dict[str, dict]:
    """The summaries a run wrote in a family's folder, by cell."""
    return {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}


def assert_hashed(summary: dict, what: str) -> None:
    """A summary of a run that checked decoded tokens keeps their sha256, not the tokens: the
    hash, and no list of integers anywhere in the summary longer than a few entries."""
    assert SHA256.fullmatch(summary[what]["sha256"]), summary[what]
    assert "json.dumps" in summary[what]["sha256_of"]

    def lists(value: object) -> list[list]:
        if isinstance(value, dict):
            return [x for v in value.values() for x in lists(v)]
        if isinstance(value, list):
            nested = [x for v in value for x in lists(v)]
            return nested + ([value] if all(type(v) is int for v in value) else [])
        return []
    token_like = [values for values in lists(summary) if len(values) > 4]
    assert not token_like, f"token lists in the summary: {token_like}"


@pytest.mark.slow
def test_quick_benchmark_writes_table_json_and_plot(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.ops.run", "--quick", "--out",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"

    table = (tmp_path / "ops" / "README.md").read_text()
    assert "## quick" in table
    assert "| op | size |" in table
    assert "Where ms_aten beats MindSpore's native CPU kernel" in table

    assert set(cells(tmp_path / "ops")) == {"quick"}
    results = cells(tmp_path / "ops")["quick"]
    assert results["meta"]["quick"] is True
    assert results["cases"], "no op was benchmarked"
    for case in results["cases"]:
        assert case["aten_out_us"] > 0
        assert {route["status"] for route in case["routes"]} <= {"ok", "wrong", "n/a"}

    plot = tmp_path / "ops" / "quick.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_model_benchmark_checks_every_route_and_counts_launches(tmp_path: Path) -> None:
    """Every route of tiny GPT-2 runs, each worker in its own process, is checked against torch
    (a wrong result fails the worker, hence the run), and launches what it should: one kernel
    per forward, two per forward+backward, so the backward is not pruned."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.models.run", "--quick",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    summaries = cells(tmp_path / "models")
    assert set(summaries) == {"gpt2-tiny_forward", "gpt2-tiny_training"}
    row: dict[str, dict] = {"torch": {}, "ms_aten": {}}
    for cell in summaries.values():
        for side, entries in row.items():
            entries.update(cell[side])
    forward = summaries["gpt2-tiny_forward"]
    assert {entry["vs"] for entry in forward["ms_aten"].values()} == set(forward["torch"]) == {
        "forward"}
    launches = {route: entry["launches"] for route, entry in row["ms_aten"].items()}
    assert launches["GRAPH forward cell(x)"] == launches["PYNATIVE forward cell(x)"] == 1
    assert launches["GRAPH forward+backward"] == launches["PYNATIVE forward+backward"] == 2
    assert launches["GRAPH forward+backward, recompute"] == 2
    assert launches["GRAPH step nn.Adam"] == 2
    assert launches["GRAPH step ms_aten.optim.Adam"] == 3  # the update is one more launch
    # ms_aten.nn's loss: its op and its VJP are two more launches
    assert launches["GRAPH forward+backward, ms_aten.nn loss"] == 4
    assert launches["GRAPH step nn.Adam, ms_aten.nn loss"] == 4
    assert all(entry["ms"] > 0 for side in ("torch", "ms_aten") for entry in row[side].values())
    assert row["torch"]["forward"]["per_process_ms"]  # the torch side ran, apart
    assert "| GRAPH forward cell(x) |" in (tmp_path / "models" / "README.md").read_text()


def test_quick_dynamic_benchmark_checks_both_workloads_on_every_route(tmp_path: Path) -> None:
    """Decoding and training on every ms_aten route (both modes, dynamic and static), each in
    its own process beside torch eager's: the workers' tokens equal torch's and their losses
    follow torch's (the run fails otherwise), and every item launches what it should: one
    kernel per decoded token, three per training step (forward, backward, the Adam update)."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.dynamic.run", "--quick",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    workloads = cells(tmp_path / "dynamic")
    assert set(workloads) == {"decode", "train"}
    assert_hashed(workloads["decode"], "produced")  # the tokens every route made, hashed
    for workload, launches in (("decode", 1), ("train", 3)):
        row = workloads[workload]["routes"]
        routes = [f"{mode}-{shapes}" for mode in ("graph", "pynative")
                  for shapes in ("dynamic", "static")]
        assert all(row[route]["launches_per_item"] == launches for route in routes)
        assert all(row[route]["steady_ms"] > 0 for route in [*routes, "torch"])
    assert "| ms_aten GRAPH, dynamic |" in (tmp_path / "dynamic" / "README.md").read_text()


def test_quick_decode_benchmark_makes_torch_s_tokens_on_every_route(tmp_path: Path) -> None:
    """Every decoding route of tiny GPT-2 (torch's static-cache loop and model.generate;
    ms_aten.generate, the GRAPH and PYNATIVE step loops) makes model.generate's tokens (the run
    fails otherwise), one kernel launch per token on the ms_aten routes; the step loops report
    the prefill and per-token times, the whole-loop graph only its total."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.decode.run", "--quick",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    summaries = cells(tmp_path / "decode")
    assert set(summaries) == {"gpt2-tiny_graph", "gpt2-tiny_pynative"}
    routes = {route: entry for cell in summaries.values()
              for route, entry in cell["routes"].items()}
    assert set(routes) == {"static-loop", "generate", "graph-generate", "graph-loop",
                           "pynative-loop"}
    for row in summaries.values():
        assert {"static-loop", "generate"} <= set(row["routes"])  # torch's, beside each cell's
        assert_hashed(row, "reference")
        assert row["reference"]["length"] == row["workload"]["new_tokens"]
        assert row["reference"]["distinct"] > 3  # the token check can tell a wrong cache
    for route in ("graph-generate", "graph-loop", "pynative-loop"):
        assert routes[route]["launches_per_token"] == 1
    for route in ("static-loop", "generate", "graph-loop", "pynative-loop"):
        assert set(routes[route]["per_token_ms"]) == {"12", "26"}
        assert routes[route]["prefill_ms"] > 0 and routes[route]["decode_tokens_per_s"] > 0
    assert "prefill_ms" not in routes["graph-generate"]
    assert all(entry["total_s"] > 0 and entry["peak_mib"] >= entry["rss_before_mib"] > 0
               for entry in routes.values())
    assert "| ms_aten GRAPH, step loop |" in (tmp_path / "decode" / "README.md").read_text()


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
    assert set(cells(tmp_path / "compiled")) == {"gpt2-tiny"}
    row = cells(tmp_path / "compiled")["gpt2-tiny"]["routes"]
    assert row["forward"]["ms_aten compiled"]["launches"] == 1
    assert row["training step"]["ms_aten compiled"]["launches"] == 3
    assert all(entry["nodes"] == 1 for entry in (row["forward"]["ms_aten compiled"],
                                                 row["training step"]["ms_aten compiled"]))
    for entries in row.values():
        for entry in entries.values():
            assert entry["ms"] > 0 and entry["compile_s"] > 0
    assert "| gpt2-tiny | forward |" in (tmp_path / "compiled" / "README.md").read_text()


def test_compute_bound_counts_the_models_products(tmp_path: Path) -> None:
    """benchmarks.models.bound on GPT-2 tiny (2 layers, 32 wide, 2 x 8 tokens, vocabulary 100):
    its forward's products are the linears' 2 x tokens x (12 x hidden^2 per layer) and the
    output projection's 2 x tokens x hidden x vocabulary (torch's FlopCounterMode does not
    count the CPU flash-attention kernel), the backward's twice that, and the bound is the work
    over the measured peak."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.models.bound", "--model", "gpt2-tiny",
                           "--gemm-size", "256"],
                          cwd=ROOT, capture_output=True, text=True, timeout=TIME_LIMIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    tokens, hidden, layers, vocab = 2 * 8, 32, 2, 100
    forward = 2 * tokens * (12 * hidden ** 2 * layers + hidden * vocab) / 1e9
    assert result["gflop"]["forward"] == pytest.approx(forward)
    assert result["gflop"]["forward+backward"] == pytest.approx(3 * forward)
    assert result["peak_gflops"] > 0
    for route, gflop in result["gflop"].items():
        assert result["bound_ms"][route] == pytest.approx(1e3 * gflop / result["peak_gflops"])


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
    summaries = cells(tmp_path / "decode_batch")
    assert set(summaries) == {"llama-tiny_bfloat16_b2", "llama-tiny_bfloat16_b2_onednn"}
    ms_aten_routes = ("graph-generate", "pynative-generate", "graph-onednn", "pynative-onednn")
    routes = {}
    for name, cell in summaries.items():
        assert sorted(cell["lengths"]) == [6, 11] and cell["width"] == 11  # mixed, left-padded
        assert cell["facts"]["kv_bytes_per_position"] == 2 * 2 * 2 * 2 * 16 * 2
        assert cell["facts"]["weight_bytes"] == 2 * cell["facts"]["parameters"]
        assert {"generate", "static-loop"} <= set(cell["routes"])  # torch's, beside each kernel
        assert cell["linear_kernel"] == ("onednn" if name.endswith("_onednn") else "aten")
        assert_hashed(cell, "reference")
        assert cell["reference"]["rows"] == 2
        assert cell["reference"]["distinct_per_row"][1] > 3  # the check can tell a wrong mask
        assert cell["bandwidth_gb_s"]["start"] > 0
        routes.update(cell["routes"])
    assert set(routes) == {"generate", "static-loop", *ms_aten_routes}
    for route in ms_aten_routes:
        assert routes[route]["launches_per_token"] == 1
        assert routes[route]["rows_equal_static_loop"] == routes[route]["rows_equal_generate"] == 2
        # the same tokens as torch's static-cache loop: the same hash
        assert routes[route]["tokens_sha256"] == routes["static-loop"]["tokens_sha256"]
    assert all(entry["step_ms"] > 0 and entry["tokens_per_s"] > 0 for entry in routes.values())
    assert "| ms_aten.generate, GRAPH (one graph) |" in (
        tmp_path / "decode_batch" / "README.md").read_text()


def test_quick_losses_benchmark_checks_every_route_against_torch(tmp_path: Path) -> None:
    """Cross entropy's forward and backward on every route (ms_aten.nn and MindSpore's own, both
    modes), each in its own process beside torch eager's: the losses and gradients match
    torch's (the run fails otherwise), and ms_aten.nn's step is two launches."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.losses.run", "--quick",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIME_LIMIT_S)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    row = cells(tmp_path / "losses")["8x100"]["routes"]
    assert set(row) == {"torch", "ms_aten.nn graph", "ms_aten.nn pynative", "mindspore graph",
                        "mindspore pynative"}
    assert row["ms_aten.nn graph"]["launches_per_call"] == 2
    assert row["ms_aten.nn pynative"]["launches_per_call"] == 2
    assert "| ms_aten.nn graph |" in (tmp_path / "losses" / "README.md").read_text()


def test_quick_opaque_benchmark_times_both_variants_in_both_modes(tmp_path: Path) -> None:
    # Each variant's worker checks its value and gradients against torch eager before timing.
    done = subprocess.run([sys.executable, "-m", "benchmarks.opaque.run", "--quick", "--out",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIME_LIMIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    table = (tmp_path / "opaque" / "README.md").read_text()
    for mode in ("GRAPH", "PYNATIVE"):
        assert f"| 64, 8 | {mode} | forward+backward |" in table
