"""The AOT launcher (tests/aot_launcher/launcher.cpp), a C++ program that calls libms_aten.so's
entry points as MindSpore's AOT kernel does, on the CPU: its results against torch and against
the same ops and program run through MindSpore; errors; the CUDA part's compile check; and
scripts/gpu_check.sh's steps that a CPU can run."""
from __future__ import annotations

import ast
import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import device_units
import mindspore as ms
import pytest
import torch
from aot_launcher import bench, cases, gpt2_eager, make_cases
from aot_launcher.check import LAUNCHER_OUTPUT
from mindspore import nn

import ms_aten
from ms_aten.native import library
from ms_aten.programs.module import TorchModule

from common import assert_same, run, set_mode, to_ms

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "tests" / "aot_launcher" / "launcher.cpp"
COMPILER = os.environ.get("CXX", "c++")
# MindSpore's AotExtra passes std::string in the old ABI: the launcher is built as MindSpore is.
FLAGS = ["-std=c++17", "-O1", "-Wall", "-Werror", "-D_GLIBCXX_USE_CXX11_ABI=0"]
CUDA_INCLUDE = Path("/usr/local/cuda/include")
pytestmark = pytest.mark.skipif(shutil.which(COMPILER) is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, TorchModule]:
    """scripts/gpu_prepare.sh's files (the op specs, GPT-2 tiny's program and torch's
    references, and a benchmark program of GPT-2 tiny's size) and GPT-2's Cell, captured again
    here."""
    path = tmp_path_factory.mktemp("aot_cases") / "cases"
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_prepare.sh"), str(path)],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "BENCHMARK": "tiny"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"bash scripts/gpu_check.sh {path}" in result.stdout
    model, tokens = make_cases.gpt2()
    return path, ms_aten.module(model, kwargs={"input_ids": tokens})


@pytest.fixture(scope="module")
def checked(made, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """scripts/gpu_check.sh on the CPU: it builds the launcher, runs every case through it with
    the built libms_aten.so and judges each against torch; the launcher's files are under
    <work>/cases."""
    work = tmp_path_factory.mktemp("gpu_check")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--cpu", str(library.LIBRARY),
         str(made[0])], capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable, "WORK": str(work)})
    return result, work / "cases"


def test_every_case_matches_torch_and_every_error_is_reported(made, checked):
    result, _ = checked
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert not failed, "\n".join(failed)
    # register, every op case the CPU runs, the program's forward and backward
    names = ["register aot_launcher", *(c.name for c in cases.OP_CASES if not c.cuda_only),
             "gpt2_forward", "gpt2_backward",
             f"benchmark {bench.manifest(made[0])['model']}"]
    assert [line.split(":")[0] for line in lines[:-1]] == [f"PASS {n}" for n in names]
    assert lines[-1].startswith(f"[gpu_check] {len(names)} passed, 0 failed")
    assert "PASS gpt2_backward: matches torch" in result.stdout
    benchmark = next(line for line in lines if line.startswith("PASS benchmark"))
    assert re.search(r"forward\+backward [\d.]+ ms through the launcher .* torch eager [\d.]+ ms",
                     benchmark), benchmark
    bad_spec = next(line for line in lines if line.startswith("PASS bad_spec"))
    assert "rc=-1" in bad_spec and "operator aten::not_an_op is not registered" in bad_spec


def test_the_launcher_reports_every_launch_and_lives_past_errors(checked):
    _, folder = checked
    launches, registered = cases.parse((folder / LAUNCHER_OUTPUT).read_text())
    assert registered == {make_cases.FAMILY: ""}
    assert all(len(runs) == 2 for runs in launches.values())  # a warm-up, then the checked one
    for name in ("bad_spec", "no_spec", "wrong_dtype"):
        assert all(run.rc == -1 and run.error for run in launches[name]), name
    assert "expected m1 and m2 to have the same dtype" in launches["wrong_dtype"][0].error
    assert [run.rc for run in launches["after_errors"]] == [0, 0]


@pytest.mark.parametrize("plan, message", [
    ("kernel k MsAtenCallNowhere", "the library has no entry point MsAtenCallNowhere"),
    ("kernel k MsAtenCall\nin float32 2,2 x.bin\nlaunch", "x.bin holds 4 bytes, the input needs"),
    ("launch", "'launch' before any kernel"),
])
def test_a_bad_plan_stops_the_launcher_with_the_reason(plan, message, checked, tmp_path):
    launcher = checked[1].parent / "launcher"  # gpu_check.sh built it in its $WORK
    (tmp_path / "x.bin").write_bytes(bytes(4))
    (tmp_path / "plan.txt").write_text(plan + "\n")
    result = subprocess.run([str(launcher), str(library.LIBRARY), str(tmp_path / "plan.txt")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_the_judge_fails_a_wrong_result(checked):
    # Spoil one of the launcher's output files and judge again; then put it back.
    _, folder = checked
    planned = cases.write_plan(folder, torch.device("cpu"))
    softmax = next(p for p in planned if p.name == "softmax")
    output = folder / softmax.outputs[0].file
    kept = output.read_bytes()
    output.write_bytes(bytes(len(kept)))  # zeros
    try:
        judged = {o.name: o for o in cases.judge(planned, (folder / LAUNCHER_OUTPUT).read_text(),
                                                 folder, torch.device("cpu"))}
    finally:
        output.write_bytes(kept)
    assert not judged["softmax"].passed and "output 0" in judged["softmax"].detail
    assert judged["leaky_relu"].passed


def test_the_judge_blames_ms_aten_only_for_its_own_waits(checked):
    # The CUDA verdicts, on the CPU run's output with gate results written in: a launch that
    # waited fails "no synchronization", unless torch's own call waits too.
    _, folder = checked
    planned = cases.write_plan(folder, torch.device("cpu"))
    next(p for p in planned if p.name == "softmax").torch_waits = True
    stdout = (folder / LAUNCHER_OUTPUT).read_text()

    def judged(waiting: tuple[str, ...]) -> dict[str, cases.Outcome]:
        gated = re.sub(r"^(launch (\S+) rc=\S+ ms=\S+)",
                       lambda m: m[1] + (" queued=0" if m[2] in waiting else " queued=1"),
                       stdout, flags=re.MULTILINE)
        return {o.name: o for o in cases.judge(planned, gated, folder, torch.device("cpu"))}

    assert judged(())["no synchronization"].passed
    outcomes = judged(("leaky_relu", "softmax"))
    assert not outcomes["no synchronization"].passed
    assert outcomes["no synchronization"].detail.endswith("ms_aten waited in: leaky_relu")
    assert "NOT queued" in outcomes["leaky_relu"].detail and outcomes["leaky_relu"].passed
    assert "torch's own call waits too" in outcomes["softmax"].detail
    assert outcomes["stream order"].passed


def _output(folder: Path, name: str, k: int, like: torch.Tensor) -> torch.Tensor:
    return cases.load(folder / f"{name}.out{k}.bin", like.dtype, like.shape)


class WeightedSum(nn.Cell):
    """sum(op(x) * w): its gradient in x is the op's VJP with cotangent w."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x, w):
        return (self.op(x) * w).sum()


# One of each kind: an op and its gradient, a Tensor[] argument, two outputs, two dtypes.
THROUGH_MINDSPORE = ("leaky_relu", "leaky_relu_grad", "index_put", "max_dim", "cumsum_bfloat16",
                     "cumsum_int64")


@pytest.mark.parametrize("case", [c for c in cases.OP_CASES if c.name in THROUGH_MINDSPORE],
                         ids=lambda c: c.name)
def test_launcher_gives_what_the_op_gives_through_mindspore(case, checked, mode):
    _, folder = checked
    inputs = case.inputs()
    op = ms_aten.op(case.op, **case.constants)
    if case.vjp:  # the op's gradient, through MindSpore's autodiff and the op's bprop
        set_mode(mode)
        x, w = to_ms(inputs[0]), to_ms(inputs[1])
        through_ms: tuple = (ms.grad(WeightedSum(op), grad_position=0)(x, w),)
    else:
        result = run(op, to_ms(case.group(inputs)), mode)
        through_ms = result if isinstance(result, tuple) else (result,)
    expected = case.outputs(inputs)
    for k, (got, want) in enumerate(zip(through_ms, expected, strict=True)):
        assert_same(got, _output(folder, case.name, k, want), atol=0, rtol=0)


def test_program_through_the_launcher_gives_what_the_cell_gives(made, checked, mode):
    _, cell = made
    _, folder = checked
    _, tokens = make_cases.gpt2()
    set_mode(mode)
    logits = cell(input_ids=to_ms(tokens))["logits"]
    files = cases.ProgramFiles.read(folder / cases.PROGRAM)
    dtype, shape, file = files.manifest["outputs"][0]
    from_launcher = cases.load(folder / cases.PROGRAM / file, cases.TORCH_DTYPES[dtype], shape)
    assert_same(logits, from_launcher, atol=0, rtol=0)


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda_runtime_api.h").exists(),
                    reason="no CUDA toolkit headers at /usr/local/cuda/include")
def test_the_launchers_cuda_part_compiles():
    # Its CUDA part needs only the CUDA runtime's header, which torch's CPU wheel does not ship.
    result = subprocess.run([COMPILER, *FLAGS, "-DWITH_CUDA", f"-I{CUDA_INCLUDE}", "-fsyntax-only",
                             str(LAUNCHER)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_benchmark_s_torch_gpt2_is_transformers_gpt2():
    """bench.py's torch eager side (gpt2_eager.py, for a GPU machine without transformers) gives
    transformers' logits and gradients for the same weights."""
    model, tokens = make_cases.gpt2()
    weights = {n: p.detach().clone().requires_grad_() for n, p in model.named_parameters()}
    ours = gpt2_eager.forward(weights, tokens, model.config.n_layer, model.config.n_head)
    theirs = model(input_ids=tokens).logits
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    cotangent = torch.randn(theirs.shape)
    ours.backward(cotangent)
    theirs.backward(cotangent)
    # A bias's gradient sums the cotangent over every token: terms as large as the gradient's
    # largest element, which the two graphs add in other orders (MKL's kernels for the CPU).
    # Within float32 rounding of that scale: 3.8e-6 apart (one ulp at 60) on an AMD EPYC VM.
    for name, p in model.named_parameters():
        scale = max(1.0, float(p.grad.abs().max()))
        torch.testing.assert_close(weights[name].grad, p.grad, atol=1e-6 * scale, rtol=1e-5,
                                   msg=name)


def test_the_benchmark_fails_a_wrong_result(made, checked, tmp_path):
    """bench.py against a library whose program is spoiled: a FAIL line, not a time."""
    launcher = checked[1].parent / "launcher"
    folder = tmp_path / "cases"
    shutil.copytree(made[0] / bench.FOLDER, folder / bench.FOLDER)
    spec = folder / bench.FOLDER / "call.spec"
    # GELU's tanh a sigmoid: the logits differ
    spec.write_text(spec.read_text().replace("call aten::tanh .", "call aten::sigmoid ."))
    outcomes = bench.run(launcher, library.LIBRARY, folder, torch.device("cpu"), repeats=1)
    assert [o.passed for o in outcomes] == [False]
    assert "Tensor-likes are not close" in outcomes[0].detail


def test_gpu_check_without_cases_says_how_to_make_them(tmp_path):
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--cpu", str(library.LIBRARY),
         str(tmp_path / "missing")], capture_output=True, text=True,
        env={**os.environ, "PYTHON": sys.executable, "WORK": str(tmp_path)})
    assert result.returncode == 1
    assert "bash scripts/gpu_prepare.sh" in result.stdout
    assert "0 passed, 1 failed" in result.stdout


def test_gpu_check_on_a_machine_without_a_gpu_says_what_is_missing(made, tmp_path):
    # A stand-in nvidia-smi gets the script past its first check to torch's, which fails here.
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: a stand-in'\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(made[0])], capture_output=True,
        text=True, env={**os.environ, "PYTHON": sys.executable, "WORK": str(tmp_path),
                        "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert result.returncode == 1
    assert f"FAIL torch: AssertionError: torch {torch.__version__} sees no GPU" in result.stdout
    assert "0 passed, 1 failed" in result.stdout


def test_bridge_build_needs_no_mindspore_and_builds_what_setup_builds(monkeypatch):
    # scripts/build_bridge.py, the GPU machine's build: it imports nothing but the standard
    # library and torch, and compiles setup.py's every source, then links without torch_python.
    script = ROOT / "scripts" / "build_bridge.py"
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(script.read_text()))
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in (node.names if isinstance(node, ast.Import)
                              else [ast.alias(node.module or "")])}
    assert imported - set(sys.stdlib_module_names) == {"torch"}
    monkeypatch.setenv("CUDA_HOME", str(CUDA_INCLUDE.parent))
    build = runpy.run_path(str(script))
    if not (CUDA_INCLUDE / "cuda_runtime_api.h").exists():
        with pytest.raises(SystemExit, match="no CUDA toolkit headers"):
            build["commands"](Path("out"), cuda=True)
        return
    compiles, link = build["commands"](Path("out"), cuda=True)
    units = [*device_units.setup_constant("TORCH_SOURCES"), "boundary/extra_abi0.cpp"]
    assert [c[c.index("-c") + 1] for c in compiles] == [str(ROOT / "csrc" / u) for u in units]
    assert all("-DWITH_CUDA" in c for c in compiles[:-1])
    assert "-D_GLIBCXX_USE_CXX11_ABI=0" in compiles[-1] and "-DWITH_CUDA" not in compiles[-1]
    assert "-lcudart" in link and "-ltorch_python" not in link
