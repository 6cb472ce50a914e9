"""PYNATIVE cost per call of one tiny op: ms_aten's fast path (a CustomOpBuilder module,
ms_aten/ops/fast_path.py) against the ops.Custom(aot) route and MindSpore's native ops, forward and
under ms.grad. All in one process, 8-element float32 input, results and gradients checked
against torch first; prints a markdown table of medians in microseconds.

    .venv/bin/python -m benchmarks.ops.pynative_fast_path [--repeats N] [--chain K]

Rows: a forward call; one ms.grad step of f(x).sum() (ms.grad's own work included); and what
one more call adds inside ms.grad (its forward and backward), from a chain of K calls:
(step(K) - step(1)) / (K - 1). Each sample is a run of back-to-back calls ended by one executor
sync (as in common/timing.py), taken round-robin over the routes, and is read twice: wall time,
and CPU time of the whole process (all of MindSpore's threads), which a shared machine's load
disturbs less. Needs the fast-path module (python -m ms_aten.native.pyboost).
"""
from __future__ import annotations

import os

os.environ.setdefault("GLOG_v", "3")  # MindSpore logs errors only; must precede its import

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Hashable  # noqa: E402

import mindspore as ms  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from mindspore import Tensor, mint, ops  # noqa: E402

import ms_aten  # noqa: E402
from benchmarks.common.timing import TimingConfig, calibrate, ms_sync  # noqa: E402
from ms_aten.native import pyboost  # noqa: E402
from ms_aten.ops import fast_path  # noqa: E402

SLOPE = 0.2


def routes() -> dict[str, tuple[Callable, Callable]]:
    """name -> (forward call on one tensor, torch reference)."""
    relu = ms_aten.op("relu")
    leaky = ms_aten.op("leaky_relu", negative_slope=SLOPE)
    native_relu = ops.ReLU()
    return {
        "ms_aten relu, fast path": (lambda x: fast_path.call(relu, x), torch.relu),
        "ms_aten relu, Custom aot": (relu, torch.relu),
        "ms_aten leaky_relu, fast path": (lambda x: fast_path.call(leaky, x),
                                          lambda x: F.leaky_relu(x, SLOPE)),
        "ms_aten leaky_relu, Custom aot": (leaky, lambda x: F.leaky_relu(x, SLOPE)),
        "native ops.ReLU()": (native_relu, torch.relu),
        "native mint.nn.functional.relu": (mint.nn.functional.relu, torch.relu),
        # mint.nn.functional.leaky_relu has no CPU kernel in MindSpore 2.10.
        "native ops.leaky_relu": (lambda x: ops.leaky_relu(x, SLOPE),
                                  lambda x: F.leaky_relu(x, SLOPE)),
    }


def check(name: str, got: Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(torch.from_numpy(got.asnumpy()), want, msg=lambda m: f"{name}: {m}")


def chain(forward: Callable, length: int) -> Callable:
    """x -> forward applied `length` times, summed: one ms.grad step of that many calls."""
    def loss(x):
        for _ in range(length):
            x = forward(x)
        return x.sum()
    return loss


def measure(calls: dict[Hashable, Callable[[], object]],
            config: TimingConfig) -> dict[Hashable, tuple[float, float]]:
    """Median (wall, process CPU) microseconds per call; timing.measure's sampling."""
    inner = {}
    for key, call in calls.items():
        for _ in range(config.warmup):
            call()
        ms_sync()
        inner[key] = calibrate(call, ms_sync, config)
    samples: dict[Hashable, list[tuple[float, float]]] = {key: [] for key in calls}
    for _ in range(config.repeats):
        for key, call in calls.items():
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(inner[key]):
                call()
            ms_sync()
            samples[key].append(((time.perf_counter() - wall) / inner[key],
                                 (time.process_time() - cpu) / inner[key]))
    return {key: (statistics.median(w for w, _ in values) * 1e6,
                  statistics.median(c for _, c in values) * 1e6)
            for key, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=11, help="samples per cell (default 11)")
    parser.add_argument("--chain", type=int, default=17, help="calls in the long grad chain")
    args = parser.parse_args()
    if not pyboost.available():
        print("the fast-path module is not built: python -m ms_aten.native.pyboost",
              file=sys.stderr)
        return 1
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")

    x_torch = torch.linspace(-2, 2, 8)
    x = Tensor(x_torch.numpy())
    calls: dict[tuple[str, str], Callable[[], object]] = {}
    names = []
    for name, (forward, reference) in routes().items():
        names.append(name)
        check(name, forward(x), reference(x_torch))
        leaf = x_torch.clone().requires_grad_()
        (want_grad,) = torch.autograd.grad(chain(reference, args.chain)(leaf), leaf)
        grads = {n: ms.grad(chain(forward, n)) for n in (1, args.chain)}
        check(f"{name} (grad)", grads[args.chain](x), want_grad)
        calls[name, "forward"] = lambda f=forward: f(x)
        for n, grad in grads.items():
            calls[name, f"grad{n}"] = lambda g=grad: g(x)

    timings = measure(calls, TimingConfig(warmup=20, repeats=args.repeats, target_s=0.05))
    print(f"| PYNATIVE, 8 x float32: median us, wall / CPU | forward call | ms.grad step, "
          f"1 call | each call inside ms.grad (chain of {args.chain}) |")
    print("|---|---:|---:|---:|")
    for name in names:
        row = [timings[name, "forward"]]
        one, many = timings[name, "grad1"], timings[name, f"grad{args.chain}"]
        row += [one, tuple((m - o) / (args.chain - 1) for m, o in zip(many, one, strict=True))]
        print(f"| {name} | " + " | ".join(f"{wall:.0f} / {cpu:.0f}" for wall, cpu in row) + " |")
    print(f"\n({args.repeats} samples per cell; CPU = the whole process, all threads; "
          f"ops.leaky_relu is a Python composite of 3 native ops)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
