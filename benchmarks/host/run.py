"""MindSpore's own training step (nn.Dense layers, nn.Adam, one jitted step), with nothing of
ms_aten in it, timed in processes that differ only in what they import and set: does importing
ms_aten slow MindSpore's own graphs, and does the MS_DEV_HOST_BLOCKING_RUN=1 that `import ms_aten`
asks for on the CPU (docs/devices.md) slow them?

    .venv/bin/python -m benchmarks.host.run [--processes 3] [--out DIR]

Variants, one fresh process each, alternating, --processes rounds, medians:
- "MindSpore alone": a process that sets nothing and never imports torch or ms_aten;
- "blocking run": the same with MS_DEV_HOST_BLOCKING_RUN=1 set;
- "ms_aten imported": `import ms_aten` first (torch with it, and the blocking run it asks for).
Workloads: a wide MLP (4 x Dense(1024, 1024), batch 256) and a small one (2 x Dense(64, 64),
batch 32, where the step is fixed costs). Each step returns the loss and ends with a sync.
Writes benchmarks/results/host.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import workers

VARIANTS = {"MindSpore alone": ({}, None),
            "blocking run": ({"MS_DEV_HOST_BLOCKING_RUN": "1"}, None),
            "ms_aten imported": ({}, "ms_aten")}
WORKLOADS = {"wide MLP": (1024, 4, 256), "small MLP": (64, 2, 32)}  # width, layers, batch


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--out", type=Path, default=workers.RESULTS)
    parser.add_argument("--worker", choices=list(WORKLOADS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
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
    lines = ["| workload | " + " | ".join(VARIANTS) + " |", "|---|" + "---:|" * len(VARIANTS)]
    for workload, row in results.items():
        alone = statistics.median(row["MindSpore alone"])
        cells = [f"{statistics.median(v):.3f} ms (×{statistics.median(v) / alone:.2f})"
                 for v in row.values()]
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    meta = workers.machine_meta(started, load_start)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (args.out / "host.md").write_text(
        "# MindSpore's own training step, with and without ms_aten\n\n"
        + workers.machine_header(meta) + f"- {args.processes} processes per variant\n\n"
        + __doc__.split("\n\n", 2)[2].split("\nWrites")[0] + "\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
