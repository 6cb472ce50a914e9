"""What one op-benchmark run measures, and how hard: shared by ops/run.py and both workers, so that
the torch worker times the baselines of exactly the cases the MindSpore worker times."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.common.timing import TimingConfig
from benchmarks.common.workers import RESULTS
from benchmarks.ops.results import baseline_key

SEED = 0
THREAD_COUNTS = (1, 2)
ALL_OPS = ("relu", "leaky_relu", "gelu", "softmax", "layer_norm", "sum", "cumsum", "mm",
           "conv2d", "topk", "sort", "index_select", "embedding", "masked_select")
THREAD_OPS = ("relu", "leaky_relu", "gelu", "softmax", "layer_norm", "sum", "cumsum")
DISPATCHER_OPS = ("leaky_relu", "relu")
DISPATCHER_SIZE = "tiny"


@dataclass(frozen=True)
class Plan:
    """What one run measures, and how hard."""

    ops: tuple[str, ...]
    sizes: tuple[str, ...]
    thread_ops: tuple[str, ...]
    thread_size: str
    chain_length: int
    small: TimingConfig
    large: TimingConfig
    dispatcher: TimingConfig
    build_seed: bool
    out: Path

    def config(self, size: str) -> TimingConfig:
        return {"large": self.large, DISPATCHER_SIZE: self.dispatcher}.get(size, self.small)

    def baselines(self) -> dict[str, tuple[str, str, int]]:
        """Every ATen out= baseline the run needs, by key: (op, size, threads), threads 0 for
        ATen's default."""
        wanted = [(op, size, 0) for op in self.ops for size in self.sizes]
        wanted += [(op, "small", 0) for op in self.ops]  # the chains' single call
        wanted += [(op, self.thread_size, n) for op in self.thread_ops for n in THREAD_COUNTS]
        wanted += [(op, DISPATCHER_SIZE, 0) for op in DISPATCHER_OPS]
        return {baseline_key(*w): w for w in wanted}


FULL = Plan(ops=ALL_OPS, sizes=("small", "large"), thread_ops=THREAD_OPS, thread_size="large",
            chain_length=50, small=TimingConfig(warmup=5, repeats=11, target_s=0.1),
            large=TimingConfig(warmup=2, repeats=5, target_s=0.1),
            dispatcher=TimingConfig(warmup=50, repeats=21, target_s=0.2), build_seed=True,
            out=RESULTS)
QUICK = Plan(ops=("leaky_relu", "softmax", "topk"), sizes=("small",),
             thread_ops=("leaky_relu",), thread_size="small", chain_length=50,
             small=TimingConfig(warmup=1, repeats=3, target_s=0.01),
             large=TimingConfig(warmup=1, repeats=3, target_s=0.01),
             dispatcher=TimingConfig(warmup=2, repeats=5, target_s=0.01), build_seed=False,
             out=RESULTS / "quick")


def plan_from_command_line(description: str) -> Plan:
    """The plan a worker's command line names: --quick and --ops, as ops/run.py passes them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--ops")
    args = parser.parse_args()
    return plan_for(args.quick, args.ops)


def plan_for(quick: bool, ops: str | None) -> Plan:
    """The full or quick plan, narrowed to `ops` (comma-separated) when given."""
    plan = QUICK if quick else FULL
    if ops:
        chosen = tuple(ops.split(","))
        plan = replace(plan, ops=chosen,
                       thread_ops=tuple(o for o in plan.thread_ops if o in chosen))
    return plan
