"""ATen's float32 linear against oneDNN's inner product (mkldnn::_linear_pointwise, what
`ms_aten.causal_lm(..., linear_kernel="onednn")` runs) at the decoding benchmark's weight shapes
and a decode step's rows, in a process that never imports MindSpore:

    .venv/bin/python -m benchmarks.decode_batch.linear_kernels [--out FILE.md]

Each shape's weight is held in enough copies to fill 512 MiB, and the calls go round them, so
every call reads its weight from memory as a decode step does (the models' weights are larger
than the L3 cache). Per kernel: ms per call (the best of 3 passes), the weight's GB/s, and
the CPU time over the wall time (how many of the team's threads worked). In the same run, the
bounds: a sum over a 1 GiB buffer (read only) and a copy of it (read + write counted).
"""
from __future__ import annotations

import argparse
import itertools
import resource
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.decode_batch.worker_torch import bandwidth_gb_s

# (name, out features, in features): the 0.5B Llama's layers and head, GPT-2 small's head (its
# layers are Conv1D, an addmm the rewrite leaves alone).
SHAPES = [("Llama q, o", 1024, 1024), ("Llama k, v", 256, 1024),
          ("Llama gate, up", 5632, 1024), ("Llama down", 1024, 5632),
          ("Llama head", 32000, 1024), ("GPT-2 head", 50257, 768)]
ROWS = (1, 4, 16)
POOL_BYTES = 512 * 2**20


def timed(call: Callable[[], object], calls: int) -> tuple[float, float]:
    """(seconds per call, CPU seconds over wall seconds), the best of 3 passes."""
    call()
    best = (float("inf"), 0.0)
    for _ in range(3):
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        start, cpu_start = time.perf_counter(), cpu.ru_utime + cpu.ru_stime
        for _ in range(calls):
            call()
        wall = time.perf_counter() - start
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        if wall / calls < best[0]:
            best = wall / calls, (cpu.ru_utime + cpu.ru_stime - cpu_start) / wall
    return best


def aten_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.linear(x, weight)


def onednn_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


def over_copies(kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor,
                copies: list[torch.Tensor]) -> tuple[float, float]:
    """timed() of `kernel` on `x`, each call with the next copy of the weight."""
    pool = itertools.cycle(copies)
    return timed(lambda: kernel(x, next(pool)), len(copies))


def bandwidth() -> tuple[float, float]:
    """GB/s of a sum over a 1 GiB buffer (its bytes once), and of the batched decoding
    benchmark's copy of one (twice: read and written)."""
    source = torch.ones(2**28)
    read, _ = timed(source.sum, 5)
    return source.numel() * 4 / read / 1e9, bandwidth_gb_s(1024)


def rows_of(name: str, out_features: int, in_features: int) -> list[str]:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=generator) / in_features**0.5
    copies = [weight.clone() for _ in range(max(2, POOL_BYTES // (weight.numel() * 4)))]
    lines = []
    for rows in ROWS:
        x = torch.randn(rows, in_features, generator=generator)
        aten = aten_linear(x, weight)
        difference = float((onednn_linear(x, weight) - aten).abs().max() / aten.abs().max())
        (a, a_threads), (o, o_threads) = (over_copies(kernel, x, copies)
                                          for kernel in (aten_linear, onednn_linear))
        gb = weight.numel() * 4 / 1e9
        lines.append(f"| {name} | {out_features} x {in_features} | {rows} | {a * 1e3:.3f} "
                     f"| {gb / a:.1f} | {a_threads:.2f} | {o * 1e3:.3f} | {gb / o:.1f} "
                     f"| {o_threads:.2f} | x{a / o:.2f} | {difference:.1e} |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    read, copy = bandwidth()
    head = [f"torch {torch.__version__}, {torch.get_num_threads()} threads; a sum reads "
            f"{read:.1f} GB/s, a copy moves {copy:.1f} GB/s (read + write)", "",
            "| weight | shape | rows | ATen ms | GB/s | CPU/wall | oneDNN ms | GB/s | CPU/wall "
            "| ATen/oneDNN | max diff / max |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(head), flush=True)
    lines = [line for shape in SHAPES for line in rows_of(*shape)]
    read_end, copy_end = bandwidth()
    tail = f"\nAt the end: a sum {read_end:.1f} GB/s, a copy {copy_end:.1f} GB/s."
    print(tail)
    if args.out:
        args.out.write_text("\n".join([*head, *lines, tail]) + "\n")


if __name__ == "__main__":
    main()
