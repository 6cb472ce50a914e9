"""What the dynamic-shape benchmark's two workers share: issue 18's two workloads on a tiny GPT-2
(2 layers, 32 wide), their data, and how a workload is timed.

- decode: greedy decoding of one sequence from an 8-token prompt to 40 tokens, no KV cache, so
  every step feeds a new length;
- train: 6 batches of 4 sequences, each batch another length, 2 epochs, Adam (lr 1e-3).

Imports torch only: the torch eager worker (dynamic/worker_torch.py) runs in a process that
never imports MindSpore.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch

from benchmarks.common.workers import ROOT

# tests/ is no package: its modules import each other by their own names, so it goes on the path.
sys.path.insert(0, str(ROOT / "tests"))

import models  # noqa: E402  (tests/models.py: the model factories the tests use; torch only)

WORKLOADS = ("decode", "train")
PROMPT, TOKENS = 8, 40  # decode: prompt length, final length
LENGTHS, BATCH, EPOCHS = (8, 3, 12, 5, 16, 2), 4, 2  # train: one batch per length
LR = 1e-3
MAX_LENGTH = 64  # the model's positions, and the dynamic dim's maximum


def arguments(description: str) -> argparse.ArgumentParser:
    """The command line both workers take (the ms_aten worker adds its route)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--warm", type=int, default=5,
                        help="runs of the workload timed after the first (default 5)")
    parser.add_argument("--tokens", type=int, default=TOKENS,
                        help=f"decode: the length decoded to (default {TOKENS})")
    parser.add_argument("--lengths", type=int, default=len(LENGTHS),
                        help=f"train: the first N of the batch lengths {LENGTHS} (default all)")
    return parser


def model() -> torch.nn.Module:
    """The same weights in every process (torch's CPU generator, seed 0), in eval mode; no
    dropout either, so that both sides' training losses can be compared."""
    torch.manual_seed(0)
    return models.gpt2(seq=MAX_LENGTH, dropout=0.0).module


def prompt() -> torch.Tensor:
    return torch.randint(1, 100, (1, PROMPT), generator=torch.Generator().manual_seed(1))


def batches(lengths: int = len(LENGTHS)) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch: (tokens, next tokens) for each of the first `lengths` lengths."""
    generator = torch.Generator().manual_seed(2)
    out = []
    for length in LENGTHS[:lengths]:
        tokens = torch.randint(0, 100, (BATCH, length + 1), generator=generator)
        out.append((tokens[:, :-1], tokens[:, 1:]))
    return out


def items(workload: str, tokens: int, lengths: int) -> int:
    """Calls per run: generated tokens (decoding to `tokens`), or training steps (`lengths`
    batches an epoch)."""
    return tokens - PROMPT if workload == "decode" else lengths * EPOCHS


Run = Callable[[Callable[[], None]], list]  # a workload run: calls its argument after each item


def run_timed(n: int, run: Run, setup_s: float, warm: int) -> dict:
    """The first (cold) run of `run`, and `warm` runs after it. `run` synchronizes each of its
    `n` items (generated tokens, training steps) before it calls the function it is given, and
    returns what it produced (the tokens, or the losses). Reported: that, from the cold run;
    its total with `setup_s` (the capture, for ms_aten); its first call (capture and compile
    happen there); its ms per item after the first; and the steady state, the median over the
    warm runs of their ms per item."""
    stamps: list[float] = []
    start = time.perf_counter()
    produced = run(lambda: stamps.append(time.perf_counter()))
    assert len(stamps) == n, (len(stamps), n)
    warm_ms = []
    for _ in range(warm):
        begin = time.perf_counter()
        run(lambda: None)
        warm_ms.append((time.perf_counter() - begin) * 1e3 / n)
    return {"produced": produced, "total_s": setup_s + stamps[-1] - start,
            "setup_s": setup_s, "first_call_s": stamps[0] - start,
            "after_first_ms": (stamps[-1] - stamps[0]) * 1e3 / (n - 1),
            "steady_ms": statistics.median(warm_ms), "warm_ms": warm_ms}
