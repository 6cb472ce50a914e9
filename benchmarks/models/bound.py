"""The compute bound of a whole-model benchmark's routes: the matrix products' floating-point
work of one forward and one forward+backward (torch's FlopCounterMode over the torch eager
worker's calls, the same model, data and loss; it does not count the CPU flash-attention
kernel, about 2 % of GPT-2 small's products, so the bound is a little low), and the machine's
peak for that work (a large float32 GEMM on ATen's default threads, the MKL call the models'
products make), so that a route's time can be set against the shortest time its products
allow. Torch only, in a process of its own; prints one JSON line. Run it in the same hour as
the timings it bounds.

    .venv/bin/python -m benchmarks.models.bound --model gpt2-small
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.models.workloads import CONFIGS, case, models


def peak_gflops(size: int, repeats: int = 10) -> float:
    """The best of `repeats` timed size x size float32 products, in GFLOP/s."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(3):
        torch.mm(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return 2 * size ** 3 / min(times) / 1e9


def model_gflop(name: str) -> dict[str, float]:
    """GFLOP of one forward and of one forward+backward with the benchmark's loss."""
    c = case(name)
    x, target = c.inputs[0], c.target
    with FlopCounterMode(display=False) as forward, torch.no_grad():
        c.module(x)
    with FlopCounterMode(display=False) as training:
        models.torch_loss(c.loss, models.logits(c.module(x)), target).backward()
    return {"forward": forward.get_total_flops() / 1e9,
            "forward+backward": training.get_total_flops() / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(CONFIGS), required=True)
    parser.add_argument("--gemm-size", type=int, default=2048)
    args = parser.parse_args()
    work = model_gflop(args.model)
    # The median of three peaks: the VM's other load moves single runs.
    peak = statistics.median(peak_gflops(args.gemm_size) for _ in range(3))
    print(json.dumps({"model": args.model, "threads": torch.get_num_threads(),
                      "gflop": work, "peak_gflops": peak,
                      "bound_ms": {route: 1e3 * gflop / peak for route, gflop in work.items()}}))


if __name__ == "__main__":
    main()
