"""Build the myops extension, load it, and run it in MindSpore next to torch.

    python examples/custom_extension/example.py [--mode graph|pynative|both] [--library SO]

1. ms_aten.op("myops::my_op"): forward and gradients, which run the extension's backward
   kernel, against x * sigmoid(gate) in torch;
2. ms_aten.module of a model that calls the op: forward and every weight's gradient;
3. ms_aten.module(model, inputs, replace=[(quantize, fused_quantize)]): the model's
   mul -> add -> round -> clamp runs as the extension's one fused kernel, with its
   straight-through gradient, against torch running the model with the kernel in its place.
Each step prints its largest gap to torch; the script exits 1 unless all are within 1e-5.
"""
from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path

import mindspore as ms
import torch
from mindspore import nn

import ms_aten

sys.path.insert(0, str(Path(__file__).parent))
import myops  # noqa: E402  (beside this script)

TOLERANCE = 1e-5
MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}


class Call(nn.Cell):
    """construct(x, gate) = f(x, gate): in GRAPH mode the op runs inside a compiled graph."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def construct(self, x, gate):
        return self.f(x, gate)


class WeightedSum(nn.Cell):
    """sum(f(x) * weight) or sum(f(x, gate) * weight): a scalar in which every output element
    counts, to differentiate."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def construct(self, *args):
        if len(args) == 3:
            return (self.f(args[0], args[1]) * args[2]).sum()
        return (self.f(args[0]) * args[1]).sum()


def gap(got: ms.Tensor, want: torch.Tensor) -> float:
    return (ms_aten.to_torch(got) - want).abs().max().item()


def op_step() -> dict[str, float]:
    """ms_aten.op("myops::my_op") against torch's own math."""
    x, gate, weight = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
    op = ms_aten.op("myops::my_op")
    out = Call(op)(ms_aten.to_ms(x), ms_aten.to_ms(gate))
    grads = ms.grad(WeightedSum(op), grad_position=(0, 1))(
        ms_aten.to_ms(x), ms_aten.to_ms(gate), ms_aten.to_ms(weight))
    leaves = [x.clone().requires_grad_(), gate.clone().requires_grad_()]
    expected = leaves[0] * torch.sigmoid(leaves[1])
    want = torch.autograd.grad((expected * weight).sum(), leaves)
    return {"my_op forward": gap(out, expected.detach()),
            "my_op gradients": max(gap(g, w) for g, w in zip(grads, want, strict=True))}


def weight_gradient_gap(cell: ms_aten.TorchModule, reference: torch.nn.Module, x: torch.Tensor,
                        weight: torch.Tensor) -> float:
    """The largest gap between the cell's weight gradients and torch's for the reference."""
    grads = ms.grad(WeightedSum(cell), None, cell.trainable_params())(
        ms_aten.to_ms(x), ms_aten.to_ms(weight))
    reference.zero_grad()
    (reference(x) * weight).sum().backward()
    # The cell's Parameters come in the torch module's order: named_parameters().
    return max(gap(g, p.grad) for g, p in zip(grads, reference.parameters(), strict=True))


def module_step() -> dict[str, float]:
    """ms_aten.module of a model that calls myops::my_op."""
    model = myops.GatedMLP()
    x, weight = torch.randn(8, 16), torch.randn(8, 4)
    cell = ms_aten.module(model, (x,))
    return {"GatedMLP forward": gap(cell(ms_aten.to_ms(x)), model(x).detach()),
            "GatedMLP gradients": weight_gradient_gap(cell, model, x, weight)}


def replace_step() -> dict[str, float]:
    """The quantize subgraph of a model replaced by the fused kernel at capture."""
    model = myops.QuantizedMLP()
    x, weight = torch.randn(8, 16) * 30, torch.randn(8, 4)  # some values reach the clamp
    cell = ms_aten.module(model, (x,), replace=[(myops.quantize, myops.fused_quantize)])
    print(f"  replaced {cell.program.replaced} quantize subgraph(s); the program runs "
          f"{cell.program.n_nodes} ATen calls")
    fused = copy.deepcopy(model)
    fused.step = myops.fused_quantize  # torch's reference: the kernel written into the model
    return {"QuantizedMLP forward": gap(cell(ms_aten.to_ms(x)), model(x).detach()),
            "QuantizedMLP gradients": weight_gradient_gap(cell, fused, x, weight)}


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Runs the three steps in each mode asked for; returns every gap by '<mode>: <what>'."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both")
    parser.add_argument("--library", help="a built myops.so (default: build one now)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="myops_") as scratch:  # a loaded .so may go
        library = args.library
        if library is None:
            start = time.perf_counter()
            library = myops.build(scratch)
            print(f"built {library} in {time.perf_counter() - start:.0f} s")
        myops.load(library)
    torch.manual_seed(0)
    gaps = {}
    for mode in MODES if args.mode == "both" else [args.mode]:
        ms.set_context(mode=MODES[mode])
        before = myops.backward_calls()
        print(f"{mode}:")
        for step in (op_step, module_step, replace_step):
            for what, value in step().items():
                print(f"  {what}: largest gap to torch {value:.2e}")
                gaps[f"{mode}: {what}"] = value
        print(f"  the extension's backward kernels ran {myops.backward_calls() - before} times "
              f"(MindSpore's gradients and torch's)")
    return gaps


if __name__ == "__main__":
    worst = max(main().values())
    print("OK" if worst <= TOLERANCE else f"FAILED: a gap of {worst:.2e} > {TOLERANCE}")
    sys.exit(0 if worst <= TOLERANCE else 1)
