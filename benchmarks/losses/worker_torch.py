"""torch eager's F.cross_entropy forward and backward, in a process that never imports
MindSpore: `python -m benchmarks.losses.worker_torch --rows N --classes C --calls K`."""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import workers
from benchmarks.losses.inputs import inputs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--classes", type=int, required=True)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    logits_np, target_np = inputs(args.rows, args.classes)
    logits = torch.from_numpy(logits_np).requires_grad_()
    target = torch.from_numpy(target_np).long()

    def step() -> tuple[float, torch.Tensor]:
        loss = torch.nn.functional.cross_entropy(logits, target)
        (grad,) = torch.autograd.grad(loss, logits)
        return float(loss), grad

    value, grad = step()
    times = []
    for _ in range(args.calls):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    workers.emit({"ms": statistics.median(times) * 1e3, "loss": value,
                  "grad_abs_sum": float(grad.abs().sum())})


if __name__ == "__main__":
    main()
