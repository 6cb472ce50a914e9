"""One process of the opaque-call benchmark (run.py): an MLP whose middle scales its hidden
state, captured whole (`h * 2`) or with that scale as an opaque torch call (a branch on a value,
which torch.export refuses), timed in one MindSpore mode.

    python -m benchmarks.opaque.worker --width 1024 --batch 256 --region branch --mode GRAPH

Routes: the forward `cell(x)` and the forward+backward (jitted in GRAPH mode), each checked
against torch eager (value, and every gradient) before it is timed; each reports its ms_aten
kernel launches per call.
"""
from __future__ import annotations

import argparse
import warnings

import mindspore as ms
import numpy as np
import torch

import ms_aten
from benchmarks.common.timing import TimingConfig, measure, ms_sync
from benchmarks.common.workers import emit

TIMING = TimingConfig(warmup=5, repeats=7, target_s=0.2)


class Scale(torch.nn.Module):
    """h * 2, written so that torch.export refuses it (`branch`) or captures it (`none`)."""

    def __init__(self, branch: bool) -> None:
        super().__init__()
        self.branch = branch

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.branch:
            return h * 2 if h.sum() > -1e30 else h * 0.5  # a value-dependent branch
        return h * 2


def mlp(width: int, branch: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
              Scale(branch), torch.nn.Linear(width, width), torch.nn.ReLU(),
              torch.nn.Linear(width, 1)]
    return torch.nn.Sequential(*layers)


class Sum(ms.nn.Cell):
    def __init__(self, net: ms.nn.Cell) -> None:
        super().__init__()
        self.net = net

    def construct(self, x):
        return self.net(x).sum()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--region", choices=["none", "branch"], required=True)
    parser.add_argument("--mode", choices=["GRAPH", "PYNATIVE"], required=True)
    args = parser.parse_args()
    ms.set_context(mode=getattr(ms, f"{args.mode}_MODE"))
    model = mlp(args.width, args.region == "branch")
    example = torch.randn(args.batch, args.width, generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cell = ms_aten.module(model, (example,))
    opaque = sum(issubclass(w.category, ms_aten.OpaqueWarning) for w in caught)
    if opaque != (args.region == "branch"):
        raise AssertionError(f"expected {args.region == 'branch':d} opaque calls, got {opaque}")
    params = cell.trainable_params()
    grad_fn = ms.value_and_grad(Sum(cell), None, params)
    if args.mode == "GRAPH":
        grad_fn = ms.jit(grad_fn)
    x = ms_aten.to_ms(example)
    # torch eager's reference, then the checks.
    reference = model(example).sum()
    reference.backward()
    loss, grads = grad_fn(x)
    np.testing.assert_allclose(float(loss), reference.item(), rtol=1e-4)
    for grad, (name, p) in zip(grads, model.named_parameters(), strict=True):
        np.testing.assert_allclose(grad.asnumpy(), p.grad.numpy(), rtol=1e-3,
                                   atol=1e-3 * float(p.grad.abs().max()) + 1e-7, err_msg=name)
    np.testing.assert_allclose(cell(x).asnumpy(), model(example).detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    routes = {"forward": lambda: cell(x), "forward+backward": lambda: grad_fn(x)}
    launches = {}
    for name, call in routes.items():
        before = ms_aten.launch_count()
        call()
        ms_sync()
        launches[name] = ms_aten.launch_count() - before
    timings = measure({name: (call, ms_sync) for name, call in routes.items()}, TIMING)
    emit({"width": args.width, "batch": args.batch, "region": args.region, "mode": args.mode,
          "launches": launches,
          "ms": {name: t.median_us / 1e3 for name, t in timings.items()}})


if __name__ == "__main__":
    main()
