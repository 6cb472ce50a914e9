"""The dynamic-shape benchmark's torch eager side, in a process that never imports MindSpore.
dynamic/run.py starts it; it prints one RESULT line of JSON.

    .venv/bin/python -m benchmarks.dynamic.worker_torch --workload decode|train [--warm 5]
        [--tokens 40]
"""
from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from benchmarks.common.workers import emit
from benchmarks.dynamic.workloads import (
    EPOCHS,
    LR,
    Run,
    arguments,
    batches,
    items,
    model,
    models,
    prompt,
    run_timed,
)


def decoder(module: torch.nn.Module, length: int) -> Run:
    def decode(done: Callable[[], None]) -> list:
        tokens = prompt()
        with torch.no_grad():
            while tokens.shape[1] < length:
                next_token = module(tokens).logits[:, -1].argmax(-1, keepdim=True)
                tokens = torch.cat([tokens, next_token], dim=1)
                done()
        return tokens[0].tolist()
    return decode


def trainer(module: torch.nn.Module, lengths: int) -> Run:
    optimizer = torch.optim.Adam(module.parameters(), lr=LR)
    data = batches(lengths)

    def train(done: Callable[[], None]) -> list:
        losses = []
        for _ in range(EPOCHS):
            for tokens, target in data:
                optimizer.zero_grad()
                loss = models.torch_loss("lm", module(tokens).logits, target)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                done()
        return losses
    return train


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    run = (decoder(model(), args.tokens) if args.workload == "decode"
           else trainer(model(), args.lengths))
    result = run_timed(items(args.workload, args.tokens, args.lengths), run, 0.0, args.warm)
    if "mindspore" in sys.modules:
        raise SystemExit("the torch eager worker imported MindSpore: its timings are void")
    emit({"side": "torch", "threads": torch.get_num_threads(), **result})


if __name__ == "__main__":
    main()
