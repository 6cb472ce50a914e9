"""One MindSpore route of the cross entropy's forward and backward (value_and_grad over the
logits, in PYNATIVE or GRAPH mode): `python -m benchmarks.losses.worker_ms_aten --route R ...`,
R one of ms_aten.nn (ms_aten.nn.CrossEntropyLoss) or mindspore (ops.cross_entropy)."""
from __future__ import annotations

import argparse
import statistics
import time

import mindspore as ms
import numpy as np
from mindspore import nn, ops

import ms_aten
from benchmarks.common import workers
from benchmarks.losses.inputs import inputs

ROUTES = ("ms_aten.nn", "mindspore")


class MindSporeLoss(nn.Cell):
    def construct(self, logits, target):
        return ops.cross_entropy(logits, target)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--route", choices=ROUTES, required=True)
    parser.add_argument("--mode", choices=("graph", "pynative"), required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--classes", type=int, required=True)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    logits_np, target_np = inputs(args.rows, args.classes)
    logits, target = ms.Tensor(logits_np), ms.Tensor(target_np)
    loss_fn = ms_aten.nn.CrossEntropyLoss() if args.route == "ms_aten.nn" else MindSporeLoss()
    step = ms.value_and_grad(loss_fn)

    def run() -> tuple[float, np.ndarray]:
        value, grad = step(logits, target)
        return float(value.asnumpy()), grad.asnumpy()  # both read: nothing pruned, all finished

    value, grad = run()
    times, launches = [], ms_aten.launch_count()
    for _ in range(args.calls):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    workers.emit({"ms": statistics.median(times) * 1e3, "loss": value,
                  "grad_abs_sum": float(np.abs(grad).sum()),
                  "launches_per_call": (ms_aten.launch_count() - launches) / args.calls})


if __name__ == "__main__":
    main()
