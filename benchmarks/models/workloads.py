"""What the whole-model benchmark's two workers share: the models, the settings, the timing and
memory measurement.

Imports torch only: the torch eager worker (models/worker_torch.py) runs in a process that never
imports MindSpore, and checks that it did not.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.common.timing import TimingConfig, measure, no_sync
from benchmarks.common.workers import ROOT

# tests/ is no package: its modules import each other by their own names, so it goes on the path.
sys.path.insert(0, str(ROOT / "tests"))

import models  # noqa: E402  (tests/models.py: the model factories the tests use; torch only)

CONFIGS: dict[str, Callable[[], models.Case]] = {
    "gpt2-tiny": lambda: models.gpt2(),  # 2 layers, 32 wide, 8 tokens
    "gpt2-medium": lambda: models.gpt2(layers=4, hidden=256, heads=4, seq=128, vocab=1000),
    "bert-medium": lambda: models.bert(layers=4, hidden=256, heads=4, seq=128, vocab=1000),
    # The sizes users compare: GPT-2 small and BERT-base, 2 x 128 tokens.
    "gpt2-small": lambda: models.gpt2(layers=12, hidden=768, heads=12, seq=128, vocab=50257),
    "bert-base": lambda: models.bert(layers=12, hidden=768, heads=12, seq=128, vocab=30522),
}
# The routes each worker times, and the torch route each ms_aten route is compared with.
TORCH_FORWARD, TORCH_GRAD, TORCH_STEP, TORCH_STEP_FUSED, TORCH_ADAM = (
    "forward", "forward+backward", "step Adam", "step Adam(fused=True)", "Adam update alone")
TORCH_ROUTES = (TORCH_FORWARD, TORCH_GRAD, TORCH_STEP, TORCH_STEP_FUSED, TORCH_ADAM)
MS_ATEN_ROUTES = {
    "GRAPH forward cell(x)": TORCH_FORWARD,
    "GRAPH forward ms.jit": TORCH_FORWARD,
    "GRAPH forward+backward": TORCH_GRAD,
    "GRAPH forward+backward, recompute": TORCH_GRAD,
    "GRAPH forward+backward, loss in the program": TORCH_GRAD,
    "GRAPH forward+backward, ms_aten.nn loss": TORCH_GRAD,
    "GRAPH step nn.Adam": TORCH_STEP,
    "GRAPH step nn.Adam, ms_aten.nn loss": TORCH_STEP,
    "GRAPH step ms_aten.optim.Adam": TORCH_STEP,
    "GRAPH step ms_aten.optim.Adam, loss in the program": TORCH_STEP,
    "GRAPH nn.Adam update alone": TORCH_ADAM,
    "GRAPH ms_aten.optim.Adam update alone": TORCH_ADAM,
    "PYNATIVE forward cell(x)": TORCH_FORWARD,
    "PYNATIVE forward+backward": TORCH_GRAD,
    "PYNATIVE step nn.Adam": TORCH_STEP,
    "PYNATIVE step ms_aten.optim.Adam": TORCH_STEP,
}
COMPILE_CHOICES = ("none", "inference", "training", "torch.compile")
LR = 1e-4  # the training steps' learning rate
BETAS = (0.9, 0.999)
EPS = 1e-8


@dataclass(frozen=True)
class Task:
    """One worker's job, from its command line."""

    model: str
    measure: str  # "time" or "memory"
    route: str | None  # the one route to measure; None: every route, in turns (--quick)
    threads: int  # ATen threads, 0: ATen's default
    timing: TimingConfig
    # "none" (interpreted / eager), or compiled: ms_aten's compile= for "inference" or
    # "training"; torch.compile for "torch.compile"
    compile: str = "none"
    cache_dir: str | None = None  # ms_aten's compile cache (None: a fresh one)


def parse_task(description: str) -> Task:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", choices=list(CONFIGS), required=True)
    parser.add_argument("--measure", choices=["time", "memory"], default="time")
    parser.add_argument("--route", help="the one route to measure (default: every route, "
                                        "timed in turns: a smoke run, as routes in one process "
                                        "slow each other down)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--target-s", type=float, default=0.2)
    parser.add_argument("--compile", choices=COMPILE_CHOICES, default="none",
                        help="ms_aten: compile= for inference or training; torch: torch.compile")
    parser.add_argument("--cache-dir", help="ms_aten's compile cache (default: a fresh one)")
    args = parser.parse_args()
    return Task(args.model, args.measure, args.route, args.threads,
                TimingConfig(warmup=2, repeats=args.repeats, target_s=args.target_s),
                args.compile, args.cache_dir)


def case(name: str) -> models.Case:
    """The model and its data, the same in every process (torch's CPU generator, seed 0)."""
    torch.manual_seed(0)
    return CONFIGS[name]()


def fingerprint(logits: np.ndarray) -> float:
    """A number both workers compute from torch's forward, so that the orchestrator can check
    that they benchmarked the same weights and data. In numpy: a torch op on the ms_aten
    worker's main thread would open a second OpenMP team there (docs/devices.md), slowing the
    routes it times."""
    return float(np.abs(logits.astype(np.float64)).sum())


def time_routes(calls: dict[str, Callable[[], object]], config: TimingConfig) -> dict[str, dict]:
    """Median ms per call of each route, sampled round-robin (timing.measure). Every
    call synchronizes itself, so no sample ends with a separate sync."""
    timings = measure({name: (call, no_sync) for name, call in calls.items()}, config)
    return {name: {"ms": t.median_us / 1e3, "min_ms": t.min_us / 1e3, "inner": t.inner,
                   "samples": t.repeats} for name, t in timings.items()}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_memory(call: Callable[[], object], warmup: int = 2) -> dict:
    """Peak resident memory added by one call after `warmup` calls, and the resident memory
    before it, in MiB. Linux: writing 5 to /proc/self/clear_refs resets the peak (VmHWM) to
    the current resident size. What the warm-up calls left allocated (MindSpore's memory pool,
    torch's kept gradients) is in the resident size, not in the peak."""
    for _ in range(warmup):
        call()
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    call()
    return {"peak_mib": (_status_kib("VmHWM") - before) / 1024, "rss_mib": before / 1024}


def metadata(side: str, aten_threads: int) -> dict:
    return {"side": side, "pid": os.getpid(), "python": platform.python_version(),
            "torch": torch.__version__, "aten_threads": aten_threads,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset")}
