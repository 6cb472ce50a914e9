"""PYNATIVE cost per call of one tiny op: ms_aten's fast path (a CustomOpBuilder module,
ms_aten/fast_path.py) against the ops.Custom(aot) route and MindSpore's native ops, forward and
under ms.grad. All in one process, 8-element float32 input, results checked against torch
first; prints a markdown table of median (and min) microseconds per call.

    .venv/bin/python benchmarks/pynative_fast_path.py [--repeats N]

Needs the fast-path module (python -m ms_aten.fast_path). Timing as in bench_timing.py:
round-robin samples of back-to-back calls ending in one executor sync.
"""
from __future__ import annotations

import os

os.environ.setdefault("GLOG_v", "3")  # MindSpore logs errors only; must precede its import

import argparse  # noqa: E402
import sys  # noqa: E402
from typing import Callable  # noqa: E402

import mindspore as ms  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from mindspore import Tensor, mint, ops  # noqa: E402

import ms_aten  # noqa: E402
from bench_timing import TimingConfig, measure, ms_sync  # noqa: E402
from ms_aten import fast_path  # noqa: E402

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="samples per call (default 15)")
    args = parser.parse_args()
    if not fast_path.available():
        print("the fast-path module is not built: python -m ms_aten.fast_path", file=sys.stderr)
        return 1
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")

    x_torch = torch.linspace(-2, 2, 8)
    x = Tensor(x_torch.numpy())
    calls: dict[str, tuple[Callable[[], object], Callable[[], None]]] = {}
    for name, (forward, reference) in routes().items():
        check(name, forward(x), reference(x_torch))
        leaf = x_torch.clone().requires_grad_()
        (want_grad,) = torch.autograd.grad(reference(leaf).sum(), leaf)
        grad_fn = ms.grad(lambda t, f=forward: f(t).sum())
        check(f"{name} (grad)", grad_fn(x), want_grad)
        calls[name] = (lambda f=forward: f(x), ms_sync)
        calls[f"{name} + ms.grad"] = (lambda g=grad_fn: g(x), ms_sync)

    config = TimingConfig(warmup=200, repeats=args.repeats, target_s=0.05)
    timings = measure(calls, config)
    print("| PYNATIVE call, 8 x float32 | median us/call | min us/call |")
    print("|---|---:|---:|")
    for grad in (False, True):
        for name, timing in timings.items():
            if name.endswith("+ ms.grad") == grad:
                print(f"| {name} | {timing.median_us:.1f} | {timing.min_us:.1f} |")
    print(f"\n(forward + grad rows: ms.grad of f(x).sum(), the .sum() and ms.grad's own work "
          f"included; {args.repeats} samples each, machine load affects absolute numbers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
