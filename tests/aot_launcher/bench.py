"""The benchmark of scripts/gpu_check.sh: a GPT-2 program's forward and backward through the AOT
launcher against torch eager on the same device, each checked against the other.

make_cases.py --benchmark captures the program where ms_aten runs and writes its specs and a
manifest (no weights: GPT-2 small's take 500 MB, over what a GPU machine is handed). Here, torch
only: the weights are made from a seed (gpt2_eager.weights), written for the launcher, and run
through torch eager as gpt2_eager.forward, the same model in plain torch. One line, PASS or FAIL
(exit status 1), nothing when the folder holds no benchmark:

    cd tests && python -m aot_launcher.bench --device cuda --launcher L --library LIB DIR
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from . import gpt2_eager
from .cases import MS_DTYPES, TORCH_DTYPES, Outcome, parse, save

FOLDER = "bench"  # make_cases.py's folder for the benchmark, beside the cases'
PLAN = "bench_plan.txt"
REPEATS = 10  # timed launches of each kernel, and forward+backward runs of torch eager
_TIME = re.compile(r"^time (\S+) n=(\d+) ms=([\d.]+)(?: error=(.*))?$")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def eager(weights: dict[str, torch.Tensor], ids: torch.Tensor, cotangent: torch.Tensor,
          config: dict[str, int], repeats: int) -> tuple[torch.Tensor, list[torch.Tensor], float]:
    """torch eager's logits and gradients (in the weights' order) and its median time per
    forward+backward, in ms."""
    leaves = {n: t.detach().clone().requires_grad_() for n, t in weights.items()}

    def step() -> torch.Tensor:
        for t in leaves.values():
            t.grad = None
        logits = gpt2_eager.forward(leaves, ids, config["n_layer"], config["n_head"])
        logits.backward(cotangent)
        return logits

    logits = step()  # the first builds torch's state (CUDA context, cuBLAS, the allocator's)
    times = []
    for _ in range(repeats):
        _sync(ids.device)
        start = time.perf_counter()
        step()
        _sync(ids.device)
        times.append((time.perf_counter() - start) * 1e3)
    grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves.values()]
    return logits.detach(), grads, statistics.median(times)


def manifest(cases: Path) -> dict[str, Any]:
    """make_cases.py's description of the benchmark's program (write_benchmark)."""
    return json.loads((cases / FOLDER / "manifest.json").read_text())


def _lines(kind: str, files: list[tuple[str, list[int], str]]) -> list[str]:
    return [f"{kind} {d} {','.join(map(str, s)) or '-'} {FOLDER}/{f}" for d, s, f in files]


def run(launcher: Path, library: Path, cases: Path, device: torch.device,
        repeats: int = REPEATS, timeout: float = 240) -> list[Outcome]:
    """The benchmark's outcome lines: the launcher's results against torch eager's, with both
    times. Nothing when make_cases.py wrote no benchmark."""
    folder = cases / FOLDER
    if not (folder / "manifest.json").exists():
        return []
    m = manifest(cases)
    name = f"benchmark {m['model']}"
    weights = gpt2_eager.weights([(n, s) for n, _, s in m["weights"]], device)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, m["config"]["vocab_size"], m["tokens"], generator=generator)
    logits_shape = m["outputs"][0][1]
    cotangent = torch.randn(logits_shape, generator=generator).to(device)
    ids = ids.to(device)
    logits, grads, eager_ms = eager(weights, ids, cotangent, m["config"], repeats)

    inputs = [(d, s, f"input{i}.bin") for i, (_, d, s) in enumerate(m["weights"])]
    inputs.append((MS_DTYPES[ids.dtype], list(ids.shape), "tokens.bin"))
    for i, (n, _, _) in enumerate(m["weights"]):
        save(weights[n], folder / f"input{i}.bin")
    save(ids, folder / "tokens.bin")
    save(cotangent, folder / "cotangent.bin")
    outputs = [(d, s, f"output{k}.bin") for k, (d, s) in enumerate(m["outputs"])]
    gradients = [(d, s, f"gradient{i}.bin") for i, (d, s, _) in enumerate(inputs)]
    plan = [f"register {m['family']} {FOLDER}/key.txt {FOLDER}/call.spec {FOLDER}/vjp.spec",
            "kernel forward MsAtenCall", f"attr str ms_aten_spec {FOLDER}/forward.attr",
            *_lines("in", inputs), *_lines("out", outputs), "launch", f"time {repeats}",
            "kernel backward MsAtenCall", f"attr str ms_aten_spec {FOLDER}/backward.attr",
            *_lines("in", [*inputs, (outputs[0][0], outputs[0][1], "cotangent.bin"),
                           *outputs[1:]]),
            *_lines("out", gradients), "launch", f"time {repeats}", ""]
    (cases / PLAN).write_text("\n".join(plan))
    result = subprocess.run([str(launcher), "--device", device.type, str(library),
                             str(cases / PLAN)], capture_output=True, text=True, timeout=timeout)
    (cases / "bench_launcher.txt").write_text(result.stdout + result.stderr)
    launches, _ = parse(result.stdout)
    failed = [f"{k}: rc={r.rc} {r.error}" for k, runs in launches.items() for r in runs if r.rc]
    timed = {t[1]: float(t[3]) for t in map(_TIME.match, result.stdout.splitlines())
             if t is not None and not t[4]}
    if result.returncode != 0 or failed or set(timed) != {"forward", "backward"}:
        tail = " | ".join((result.stderr.strip().splitlines() or [""])[-3:])
        return [Outcome(name, False, f"launcher exit status {result.returncode}; "
                                     f"{'; '.join(failed) or tail or result.stdout[-300:]}")]

    def read(file: str, dtype: str, shape: list[int]) -> torch.Tensor:
        """An output file the launcher wrote, on `device`."""
        data = bytearray((folder / file).read_bytes())
        return torch.frombuffer(data, dtype=TORCH_DTYPES[dtype]).reshape(shape).to(device)

    # Both ran on this device, summing in other orders (a program's decomposed ops, torch's
    # fused ones): float32 results differ in their last bits, relative to each tensor's scale
    # (GPT-2 small's embedding gradient on the CPU: 9e-4 where its largest entries are tens).
    scale = 1e-4 if device.type == "cpu" else 1e-3

    def check(got: torch.Tensor, want: torch.Tensor) -> None:
        atol = scale * float(want.abs().max()) if want.numel() and want.is_floating_point() else 0
        torch.testing.assert_close(got, want, atol=atol, rtol=10 * scale)

    try:
        check(read(outputs[0][2], *outputs[0][:2]), logits)
        for (d, s, f), want in zip(gradients, [*grads, torch.zeros_like(ids)], strict=True):
            check(read(f, d, s), want)
    except AssertionError as error:
        return [Outcome(name, False, " ".join(str(error).split())[:400])]
    ours = timed["forward"] + timed["backward"]
    return [Outcome(name, True, (
        f"forward+backward {ours:.2f} ms through the launcher (forward {timed['forward']:.2f}, "
        f"backward {timed['backward']:.2f}, a recompute and a backward pass), torch eager "
        f"{eager_ms:.2f} ms (median of {repeats}), ratio {ours / eager_ms:.2f}; logits and "
        f"gradients match torch eager's"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="make_cases.py's folder")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--launcher", type=Path, required=True, help="the built launcher.cpp")
    parser.add_argument("--library", type=Path, required=True, help="libms_aten.so")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed runs of each side")
    args = parser.parse_args(argv)
    outcomes = run(args.launcher, args.library, args.folder, torch.device(args.device),
                   args.repeats)
    for outcome in outcomes:
        print(outcome.line())
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
