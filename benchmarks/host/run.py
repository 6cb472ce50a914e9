"""MindSpore's own training step (nn.Dense layers, nn.Adam, one jitted step), with nothing of
ms_aten in it, timed in processes that differ only in what they import and set: does importing
ms_aten slow MindSpore's own graphs, and does the MS_DEV_HOST_BLOCKING_RUN=1 that `import ms_aten`
asks for on the CPU (docs/devices.md) slow them?

    .venv/bin/python -m benchmarks.host.run [--processes 3] [--out DIR] [--note "..."]

Variants, one fresh process each, alternating, --processes rounds, medians:
- "MindSpore alone": a process that sets nothing and never imports torch or ms_aten;
- "blocking run": the same with MS_DEV_HOST_BLOCKING_RUN=1 set;
- "ms_aten imported": `import ms_aten` first (torch with it, and the blocking run it asks for).
Workloads: a wide MLP (4 x Dense(1024, 1024), batch 256) and a small one (2 x Dense(64, 64),
batch 32, where the step is fixed costs). Each step returns the loss and ends with a sync.
Writes the run's summary, benchmarks/results/host/training_step.json, and rewrites
host/README.md from it (--out DIR elsewhere).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import summaries, workers

VARIANTS = {"MindSpore alone": ({}, None),
            "blocking run": ({"MS_DEV_HOST_BLOCKING_RUN": "1"}, None),
            "ms_aten imported": ({}, "ms_aten")}
WORKLOADS = {"wide MLP": (1024, 4, 256), "small MLP": (64, 2, 32)}  # width, layers, batch
FAMILY, CELL = "host", "training_step"  # one cell: a rerun runs every variant and workload


def worker(workload: str, target_s: float = 0.5, repeats: int = 5) -> None:
    import mindspore as ms
    import numpy as np
    from mindspore import nn

    class MeanSquare(nn.Cell):
        def __init__(self, net: nn.Cell):
            super().__init__()
            self.net = net

        def construct(self, x):
            return self.net(x).square().mean()

    from benchmarks.common.timing import ms_sync

    ms.set_context(mode=ms.GRAPH_MODE)
    width, layers, batch = WORKLOADS[workload]
    net = nn.SequentialCell([nn.Dense(width, width) for _ in range(layers)])
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    grad_fn = ms.value_and_grad(MeanSquare(net), None, optimizer.parameters)

    @ms.jit
    def step(x):
        loss, grads = grad_fn(x)
        optimizer(grads)
        return loss

    x = ms.Tensor(np.random.default_rng(0).standard_normal((batch, width)).astype(np.float32))
    for _ in range(5):
        step(x)
    ms_sync()
    samples = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < target_s:
            step(x)
            ms_sync()
            calls += 1
        samples.append((time.perf_counter() - start) / calls * 1e3)
    workers.emit({"ms": statistics.median(samples), "torch": "torch" in sys.modules,
                  "ms_aten": "ms_aten" in sys.modules,
                  "blocking": os.environ.get("MS_DEV_HOST_BLOCKING_RUN")})


def section(name: str, cell: dict) -> str:
    """The run's part of the report: its record and each workload's medians by variant."""
    meta = cell["meta"]
    lines = ["| workload | " + " | ".join(VARIANTS) + " |", "|---|" + "---:|" * len(VARIANTS)]
    for workload, row in cell["workloads"].items():
        cells = [f"{row[v]['ms']:.3f} ms (×{row[v]['ratio']:.2f})" for v in VARIANTS]
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    return (summaries.machine_lines(meta) + f"- {meta['processes']} processes per variant\n\n"
            + "\n".join(lines))


def write_markdown(out: Path) -> Path:
    """host/README.md under `out`, from the summary there."""
    return summaries.write_report(out / FAMILY,
                                  "MindSpore's own training step, with and without ms_aten",
                                  __doc__.split("\n\n", 2)[2].split("\nWrites")[0], section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    workers.add_report_arguments(parser, FAMILY)
    parser.add_argument("--worker", choices=list(WORKLOADS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    out = args.out or workers.RESULTS
    if workers.report_only(args, write_markdown):
        return
    started, load_start = time.time(), os.getloadavg()
    results: dict[str, dict[str, list[float]]] = {w: {v: [] for v in VARIANTS} for w in WORKLOADS}
    for r in range(args.processes):
        order = list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]
        for workload in WORKLOADS:
            for variant in order:
                env, first = VARIANTS[variant]
                result = workers.run("benchmarks.host.run", ["--worker", workload], env, first)
                assert result["ms_aten"] == (first == "ms_aten"), result
                results[workload][variant].append(result["ms"])
                print(f"  {workload:10} {variant:17} {result['ms']:8.3f} ms", flush=True)
    medians = {workload: {v: statistics.median(ms) for v, ms in row.items()}
               for workload, row in results.items()}
    cell = {"meta": {**workers.machine_meta(started, load_start), "note": args.note,
                     "processes": args.processes},
            "workloads": {workload: {v: {"ms": medians[workload][v],
                                         "ratio": medians[workload][v]
                                         / medians[workload]["MindSpore alone"],
                                         "per_process_ms": ms} for v, ms in row.items()}
                          for workload, row in results.items()}}
    summaries.write_cell(out / FAMILY, CELL, cell)
    print(section(CELL, cell))
    print(f"wrote {write_markdown(out)}")


if __name__ == "__main__":
    main()
