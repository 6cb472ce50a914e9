"""What the batched decoding benchmark's two workers share: the models, the batches of prompts,
the routes, the command line, and how a route is timed.

Imports torch only: the torch eager worker (decode_batch/worker_torch.py) runs in a process
that never imports MindSpore.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers

from benchmarks.decode import workloads as decode
from benchmarks.decode.workloads import status_mib

PAD = 0  # the padding token; prompts draw theirs from 1..vocab-1


@dataclass(frozen=True)
class Llama:
    """A Llama-style model (grouped-query attention, SwiGLU, RMSNorm, rotary positions, the
    embedding tied to the output head, as Qwen2-0.5B), random weights drawn with standard
    deviation `init`."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    init: float

    def build(self) -> transformers.PreTrainedModel:
        config = transformers.LlamaConfig(
            vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.intermediate,
            num_hidden_layers=self.layers, num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads, max_position_embeddings=1024,
            initializer_range=self.init, tie_word_embeddings=True, bos_token_id=None,
            eos_token_id=None, pad_token_id=PAD)
        return transformers.LlamaForCausalLM(config)


@dataclass(frozen=True)
class GPT2:
    """The decoding benchmark's GPT-2 of that name (decode/workloads.py: the same weights)."""

    name: str

    @property
    def vocab(self) -> int:
        return decode.WORKLOADS[self.name].vocab

    def build(self) -> transformers.PreTrainedModel:
        return decode.model(self.name)


# Weights drawn wider than the configs' 0.02 (as decode/workloads.py explains), so that greedy
# decoding does not settle on one token and the token check can tell a wrong cache or mask.
MODELS: dict[str, Llama | GPT2] = {
    "gpt2-small": GPT2("gpt2-small"),  # 124 M parameters
    # Qwen2-0.5B's shape with a 32,000-token vocabulary and TinyLlama's MLP ratio: 24 layers,
    # 1,024 wide, 16 query heads sharing 4 key/value heads: 511 M parameters.
    "llama-0.5b": Llama(24, 1024, 16, 4, 5632, 32000, 0.05),
    "gpt2-tiny": GPT2("gpt2-tiny"),  # --quick
    "llama-tiny": Llama(2, 64, 4, 2, 128, 128, 0.3),  # --quick
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Shape:
    """The prompts of a batch: one of `single` tokens at batch 1, else lengths drawn uniformly
    from `lengths` (both ends in; numpy's generator seeded with the batch size), left-padded;
    `new_tokens` greedy tokens after them."""

    single: int
    lengths: tuple[int, int]
    new_tokens: int


FULL = Shape(32, (16, 48), 128)
QUICK = Shape(8, (4, 12), 12)


def prompts(shape: Shape, batch: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """input_ids and attention_mask (int64, batch x the longest prompt) as a tokenizer with
    padding_side='left' makes them; the tokens from torch's generator seeded with 1."""
    lengths = [shape.single] if batch == 1 else \
        np.random.default_rng(batch).integers(shape.lengths[0], shape.lengths[1] + 1, batch)
    width = max(lengths)
    ids = np.full((batch, width), PAD, np.int64)
    mask = np.zeros((batch, width), np.int64)
    generator = torch.Generator().manual_seed(1)
    for row, length in enumerate(lengths):
        ids[row, width - length:] = torch.randint(1, vocab, (int(length),), generator=generator)
        mask[row, width - length:] = 1
    return ids, mask


def build(name: str, dtype: str) -> transformers.PreTrainedModel:
    """The same weights in every process: drawn in float32 from torch's CPU generator seeded
    with 0, then cast to `dtype`; in eval mode."""
    torch.manual_seed(0)
    return MODELS[name].build().to(dtype=DTYPES[dtype]).eval()


# Route keys (the workers' --route) and how the report names them.
TORCH_ROUTES = {"generate": "torch model.generate",
                "static-loop": "torch static-cache loop"}
MS_ATEN_ROUTES = {"graph-generate": "ms_aten.generate, GRAPH (one graph)",
                  "pynative-generate": "ms_aten.generate, PYNATIVE (the loop)",
                  "graph-onednn": "the same, GRAPH, linear_kernel='onednn'",
                  "pynative-onednn": "the same, PYNATIVE, linear_kernel='onednn'"}


def cell_key(dtype: str, batch: int) -> str:
    """A cell of the benchmark's grid, for one model: its results' key."""
    return f"{dtype}/{batch}"


@dataclass(frozen=True)
class Task:
    """One worker's job, from its command line: every route over every (dtype, batch) cell."""

    model: str
    dtypes: list[str]
    batches: list[int]
    routes: list[str]
    runs: int
    shape: Shape
    expect: dict[str, list[list[int]]]  # per cell, the tokens the float32 routes must make

    def cells(self) -> list[tuple[str, int]]:
        return [(dtype, batch) for dtype in self.dtypes for batch in self.batches]


def add_task_arguments(parser: argparse.ArgumentParser, routes: dict[str, str],
                       model_required: bool = True) -> None:
    parser.add_argument("--model", choices=list(MODELS), required=model_required)
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["float32"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1])
    parser.add_argument("--route", choices=list(routes), action="append", default=[],
                        help="a route to time (one per process for a measurement)")
    parser.add_argument("--runs", type=int, default=3,
                        help="timed rounds (a generation and a one-token one) after the warm-up")
    parser.add_argument("--quick", action="store_true", help="the quick run's prompts")
    parser.add_argument("--new-tokens", type=int, help="default: the workload's 128 (quick 12)")
    parser.add_argument("--expect", type=Path,
                        help="JSON: per cell, the tokens every float32 generation must make")


def task_of(args: argparse.Namespace) -> Task:
    shape = QUICK if args.quick else FULL
    if args.new_tokens:
        shape = Shape(shape.single, shape.lengths, args.new_tokens)
    if shape.new_tokens < 2:
        raise SystemExit("--new-tokens must be at least 2 (the decode step is timed)")
    if args.runs < 1:
        raise SystemExit("--runs must be at least 1")
    expect = json.loads(args.expect.read_text()) if args.expect else {}
    return Task(args.model, args.dtypes, args.batches, args.route, args.runs, shape, expect)


Generate = Callable[[int], np.ndarray]
"""A route's generation: the (batch, n) new tokens of the prompts, n given."""


def check(tokens: np.ndarray, expect: list[list[int]] | None, what: str) -> None:
    if expect is not None and tokens.tolist() != expect:
        rows = [r for r, row in enumerate(tokens.tolist()) if row != expect[r]]
        raise AssertionError(f"{what}: rows {rows} differ: {tokens.tolist()} against "
                             f"{expect}")


def time_route(generate: Generate, setup_s: float, task: Task, expect: list[list[int]] | None,
               what: str, launches: Callable[[], int] = lambda: 0) -> dict:
    """The route's warm-up, a two-token generation (the prompt and one decode step: GRAPH
    compiles its loop, both sides run each kernel once), then task.runs rounds of a
    task.shape.new_tokens generation and a one-token one, timed: their tokens checked against
    `expect` (float32) and against the first round's (within a process, every generation must
    repeat them). The decode step: (the median total - the median of the one-token generation,
    the prefill) / (new_tokens - 1), the same for every route, the one-graph ms_aten.generate
    included. The resident memory before the timed generations and their peak (VmHWM, reset to
    the resident size before them), and ms_aten's kernel launches per token made."""
    new = task.shape.new_tokens
    start = time.perf_counter()
    warm = generate(2)
    warmup_s = time.perf_counter() - start
    check(warm, None if expect is None else [row[:2] for row in expect], f"{what}, warm-up")
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    rss_before = status_mib("VmRSS")
    counted = launches()
    totals: list[float] = []
    prefills: list[float] = []
    tokens: list[list[int]] | None = expect
    for _ in range(task.runs):
        start = time.perf_counter()
        made = generate(new)
        totals.append(time.perf_counter() - start)
        check(made, tokens, f"{what}, a timed generation")
        tokens = made.tolist()
        start = time.perf_counter()
        first = generate(1)
        prefills.append(time.perf_counter() - start)
        check(first, [row[:1] for row in tokens], f"{what}, a one-token generation")
    assert tokens is not None  # task.runs >= 1
    counted = launches() - counted
    total, prefill = statistics.median(totals), statistics.median(prefills)
    return {"tokens": tokens, "total_s": total, "prefill_s": prefill,
            "step_ms": (total - prefill) / (new - 1) * 1e3,
            "tokens_per_s": len(tokens) * new / total, "totals_s": totals,
            "prefills_s": prefills, "setup_s": setup_s, "warmup_s": warmup_s,
            "launches_per_token": counted / (task.runs * (new + 1)),
            "rss_before_mib": rss_before, "peak_mib": status_mib("VmHWM")}
