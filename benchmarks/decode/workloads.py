"""What the decoding benchmark's two workers share: the models, the prompt, the routes, the
command line, and how a generation is timed and its memory read.

Imports torch only: the torch eager worker (decode/worker_torch.py) runs in a process that never
imports MindSpore, and checks that it did not.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers


@dataclass(frozen=True)
class Workload:
    """A GPT-2 (random weights, seed 0, drawn with standard deviation `init`) and its
    generation: a prompt of `prompt` tokens (seed 1), `new_tokens` greedy tokens after it, over
    a cache of `max_cache_len` positions; the per-token time is reported at the cache
    `positions` (the position of the token fed)."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    init: float
    prompt: int
    new_tokens: int
    max_cache_len: int
    positions: tuple[int, ...]

    def cache_mib(self) -> float:
        """The static KV cache's size: keys and values, every layer, float32."""
        return 2 * self.layers * self.max_cache_len * self.hidden * 4 / 2**20


# The weights are drawn wider than GPT-2's 0.02, so that greedy decoding does not settle on one
# token (at 0.02 GPT-2 small repeats one token for most of its 128, tiny for all 24) and the
# token check can tell a wrong cache; a step's time does not depend on the weights.
WORKLOADS = {
    "gpt2-small": Workload(12, 768, 12, 50257, 0.1, 32, 128, 1024, (40, 150)),
    # The models benchmark's gpt2-medium (4 layers, 256 wide, vocab 1000), with 1024 positions
    # (there 128, too few for a 1024-position cache).
    "gpt2-medium": Workload(4, 256, 4, 1000, 0.1, 32, 128, 1024, (40, 150)),
    "gpt2-tiny": Workload(2, 32, 2, 100, 0.3, 8, 24, 64, (12, 26)),  # --quick
}
WINDOW = 4  # the per-token time at a position: the median over the tokens fed within ±WINDOW

# Route keys (the workers' --route) and how the report names them.
TORCH_ROUTES = {"static-loop": "torch eager, static-cache loop",
                "generate": "torch model.generate (dynamic cache)"}
MS_ATEN_ROUTES = {"graph-generate": "ms_aten GRAPH, ms_aten.generate (one graph)",
                  "graph-loop": "ms_aten GRAPH, step loop",
                  "pynative-loop": "ms_aten PYNATIVE, step loop",
                  "compiled-generate": "ms_aten compile=True, GRAPH, ms_aten.generate",
                  "compiled-loop": "ms_aten compile=True, GRAPH, step loop",
                  "compiled-pynative-loop": "ms_aten compile=True, PYNATIVE, step loop"}
# The routes whose step is compiled code (ms_aten.causal_lm(..., compile=True)).
COMPILED_ROUTES = ("compiled-generate", "compiled-loop", "compiled-pynative-loop")


def model(name: str) -> transformers.GPT2LMHeadModel:
    """The same weights in every process (torch's CPU generator, seed 0), in eval mode; no end
    token, so that every route makes all its tokens."""
    w = WORKLOADS[name]
    config = transformers.GPT2Config(
        vocab_size=w.vocab, n_positions=1024, n_embd=w.hidden,
        n_layer=w.layers, n_head=w.heads, initializer_range=w.init, bos_token_id=None,
        eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).eval()


def prompt(name: str) -> torch.Tensor:
    w = WORKLOADS[name]
    return torch.randint(0, w.vocab, (1, w.prompt), generator=torch.Generator().manual_seed(1))


def static_cache_wrapper(module: transformers.PreTrainedModel, max_cache_len: int,
                         batch_size: int = 1) -> torch.nn.Module:
    """transformers' TorchExportableModuleWithStaticCache over `module`, as ms_aten.causal_lm
    builds it (it insists on a static cache in the generation config, put back after)."""
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    config = module.generation_config
    saved = config.cache_implementation, config.use_cache
    config.cache_implementation, config.use_cache = "static", True
    try:
        return TorchExportableModuleWithStaticCache(module, batch_size, max_cache_len)
    finally:
        config.cache_implementation, config.use_cache = saved


@dataclass(frozen=True)
class Task:
    """One worker's job, from its command line."""

    model: str
    routes: list[str]
    runs: int  # timed generations after the first (cold) one
    new_tokens: int
    expect: list[int] | None  # the reference tokens (torch's model.generate), from run.py
    reference: bool  # only make the reference tokens, untimed (the torch worker)

    @property
    def workload(self) -> Workload:
        return WORKLOADS[self.model]


def parse_task(description: str, routes: dict[str, str], offer_reference: bool) -> Task:
    """The worker's command line; --expect is required unless --reference (if offered)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", choices=list(WORKLOADS), required=True)
    parser.add_argument("--route", choices=list(routes), action="append",
                        help="a route to time, once per route (default: every route); one per "
                             "process for a measurement, as routes in one process slow each "
                             "other down")
    parser.add_argument("--runs", type=int, default=3,
                        help="timed generations after the first (default 3)")
    parser.add_argument("--new-tokens", type=int,
                        help="tokens to generate (default: the model's workload)")
    parser.add_argument("--expect", type=Path,
                        help="a JSON list of the tokens every generation must make")
    if offer_reference:
        parser.add_argument("--reference", action="store_true",
                            help="only print model.generate's tokens, untimed")
    args = parser.parse_args()
    reference = offer_reference and args.reference
    if args.expect is None and not reference:
        parser.error("--expect is required")
    expect = json.loads(args.expect.read_text()) if args.expect else None
    new_tokens = args.new_tokens or WORKLOADS[args.model].new_tokens
    if expect is not None and len(expect) != new_tokens:
        raise SystemExit(f"--expect holds {len(expect)} tokens, the run makes {new_tokens}")
    return Task(args.model, args.route or list(routes), args.runs, new_tokens, expect,
                reference)


Run = Callable[[Callable[[], None]], list[int]]
"""A generation: returns its new tokens, and calls its argument as each token reaches the host
(a loop); the whole-loop route cannot, and never calls it."""


def check(tokens: list[int], task: Task, route: str) -> None:
    if tokens != task.expect:
        raise AssertionError(f"{route}: tokens {tokens} differ from torch's model.generate "
                             f"{task.expect}")


def figures(start: float, stamps: list[float], end: float, task: Task) -> dict:
    """One generation's figures from its start, its per-token stamps and its end: the prefill
    (the prompt's call to the first token), decode tokens/s (the tokens after the first), the
    per-token ms around each of the workload's positions, the total and its tokens/s. Without
    stamps (the whole loop in one graph) only the last two."""
    n = task.new_tokens
    result = {"total_s": end - start, "tokens_per_s": n / (end - start)}
    if not stamps:
        return result
    assert len(stamps) == n, (len(stamps), n)
    first = task.workload.prompt  # the cache position of the first token fed back
    # step[i] (i >= 1): the call that fed token i - 1, at position first + i - 1, and made token i.
    step_ms = {first + i - 1: (stamps[i] - stamps[i - 1]) * 1e3 for i in range(1, n)}
    per_token = {}
    for position in task.workload.positions:
        window = [ms for p, ms in step_ms.items() if abs(p - position) <= WINDOW]
        if len(window) == 2 * WINDOW + 1:  # a shorter run (--new-tokens) may not reach it
            per_token[str(position)] = statistics.median(window)
    return {**result, "prefill_ms": (stamps[0] - start) * 1e3,
            "decode_tokens_per_s": (n - 1) / (stamps[-1] - stamps[0]),
            "per_token_ms": per_token}


def median_figures(runs: list[dict]) -> dict:
    """The median of each figure over `runs` (generations, or processes)."""
    out: dict = {key: statistics.median(r[key] for r in runs)
                 for key in runs[0] if key != "per_token_ms"}
    if "per_token_ms" in runs[0]:
        out["per_token_ms"] = {p: statistics.median(r["per_token_ms"][p] for r in runs)
                               for p in runs[0]["per_token_ms"]}
    return out


def status_mib(field: str) -> float:
    """A field of /proc/self/status (VmRSS, VmHWM), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def stamper(stamps: list[float]) -> Callable[[], None]:
    """A run's `done`: appends the time to `stamps`."""
    return lambda: stamps.append(time.perf_counter())


def time_route(run: Run, setup_s: float, task: Task, route: str,
               launches: Callable[[], int] = lambda: 0) -> dict:
    """The route's first (cold) generation, then task.runs timed ones, every one's tokens
    checked; the median of the timed ones' figures, and the memory: the resident size before
    the timed runs and their peak (VmHWM, reset to the resident size before them by writing 5
    to /proc/self/clear_refs), with the process's peak before that (the setup: capture,
    compile). `launches` reads ms_aten's kernel launch counter."""
    start = time.perf_counter()
    cold = run(lambda: None)
    cold_s = time.perf_counter() - start
    check(cold, task, route)
    setup_peak = status_mib("VmHWM")
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    rss_before = status_mib("VmRSS")
    counted = launches()
    runs = []
    for _ in range(task.runs):
        stamps: list[float] = []
        start = time.perf_counter()
        tokens = run(stamper(stamps))
        end = time.perf_counter()
        check(tokens, task, route)
        runs.append(figures(start, stamps, end, task))
    counted = launches() - counted
    return {**median_figures(runs), "runs": runs, "tokens": cold, "setup_s": setup_s,
            "cold_s": cold_s, "launches_per_token": counted / (task.runs * task.new_tokens),
            "rss_before_mib": rss_before, "peak_mib": status_mib("VmHWM"),
            "setup_peak_mib": setup_peak}


def metadata(side: str, aten_threads: int) -> dict:
    return {"side": side, "pid": os.getpid(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "aten_threads": aten_threads,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset")}
