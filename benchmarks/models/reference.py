"""torch eager's results for the ms_aten worker's checks, computed in a process of its own that
never imports MindSpore: torch's work on the ms_aten worker's main thread would give ATen a
second OpenMP team beside ms_aten's launch thread's, and libgomp then throttles both
(docs/devices.md, "Threads on the CPU"), so the check would slow down what it checks.

    .venv/bin/python -m benchmarks.models.reference --model gpt2-tiny --out reference.npz
"""
from __future__ import annotations

import argparse
import copy
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.common.workers import emit
from benchmarks.models.workloads import BETAS, CONFIGS, EPS, LR, case, models

GROUPS = ("grads", "adam_delta", "torch_adam_delta")


@dataclass(frozen=True)
class Reference:
    """torch eager's results on the same weights and data."""

    logits: np.ndarray
    loss: float
    grads: dict[str, np.ndarray]
    adam_delta: dict[str, np.ndarray]  # one step of torch's Adam with MindSpore's epsilon
    torch_adam_delta: dict[str, np.ndarray]  # one step of torch's Adam as it is

    def save(self, path: Path) -> None:
        arrays = {f"{group}/{name}": value for group in GROUPS
                  for name, value in getattr(self, group).items()}
        np.savez(path, logits=self.logits, loss=np.array(self.loss), **arrays)

    @classmethod
    def load(cls, path: Path) -> Reference:
        with np.load(path) as saved:
            groups: dict[str, dict[str, np.ndarray]] = {group: {} for group in GROUPS}
            for key in saved.files:
                group, _, name = key.partition("/")
                if name:
                    groups[group][name] = saved[key]
            return cls(saved["logits"], float(saved["loss"]), **groups)


def compute(c: models.Case) -> Reference:
    module = copy.deepcopy(c.module)
    x, target = c.inputs[0], c.target
    with torch.no_grad():
        logits = models.logits(module(x)).numpy()
    loss = models.torch_loss(c.loss, models.logits(module(x)), target)
    loss.backward()
    grads = {n: p.grad.numpy().copy() for n, p in module.named_parameters()}
    before = {n: p.detach().clone() for n, p in module.named_parameters()}

    def one_step(eps: float) -> dict[str, np.ndarray]:
        with torch.no_grad():
            for n, p in module.named_parameters():
                p.copy_(before[n])
        torch.optim.Adam(module.parameters(), lr=LR, betas=BETAS, eps=eps).step()
        return {n: (p.detach() - before[n]).numpy() for n, p in module.named_parameters()}

    # MindSpore's Adam adds epsilon to sqrt(v) before the bias correction, torch after: at step
    # one, torch with eps / sqrt(1 - beta2) makes MindSpore's update.
    return Reference(logits, loss.item(), grads, one_step(EPS / math.sqrt(1 - BETAS[1])),
                     one_step(EPS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(CONFIGS), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    compute(case(args.model)).save(args.out)
    assert "mindspore" not in sys.modules, "the reference process must not import MindSpore"
    emit({"model": args.model})


if __name__ == "__main__":
    main()
