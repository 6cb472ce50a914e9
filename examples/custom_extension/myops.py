"""The myops extension (myops.cpp) from Python: build it, load it into torch, and the torch code
that uses it: the quantize subgraph its fused kernel replaces, and two small models.

    library = myops.build("build/")          # python -m ms_aten.build myops.cpp -o build/myops.so
    myops.load(library)                     # torch.ops.load_library: torch.ops.myops.* exist
    ms_aten.op("myops::my_op")              # a MindSpore primitive
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from ms_aten.build import build as build_kernel

SOURCE = Path(__file__).with_name("myops.cpp")


def build(out_dir: str | os.PathLike) -> Path:
    """Compiles myops.cpp into out_dir/myops.so (ms_aten.build: torch's flags, rpaths)."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return build_kernel(SOURCE, Path(out_dir) / "myops.so")


def load(library: str | os.PathLike) -> None:
    """Registers the library's ops with torch's dispatcher, as any torch extension."""
    torch.ops.load_library(str(library))


def backward_calls() -> int:
    """How many times the extension's backward kernels have run, in this process."""
    return torch.ops.myops.backward_calls()


def quantize(x: torch.Tensor) -> torch.Tensor:
    """The Torch-AIE custom-pass tutorial's quantize step as a model writes it: mul, add,
    round, clamp, four ATen ops (and round's gradient is zero)."""
    return torch.clamp(torch.round(x * 12.5 + 3.0), -128, 127)


def fused_quantize(x: torch.Tensor) -> torch.Tensor:
    """The same step as one call of the extension's fused kernel, whose backward is the
    straight-through estimator of quantization-aware training."""
    return torch.ops.myops.quantize(x, 12.5, 3.0, -128.0, 127.0)


class GatedMLP(torch.nn.Module):
    """A model that calls the extension: out(my_op(value(x), gate(x)))."""

    def __init__(self, features: int = 16, hidden: int = 32, outputs: int = 4) -> None:
        super().__init__()
        self.value = torch.nn.Linear(features, hidden)
        self.gate = torch.nn.Linear(features, hidden)
        self.out = torch.nn.Linear(hidden, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.ops.myops.my_op(self.value(x), self.gate(x)))


class QuantizedMLP(torch.nn.Module):
    """A model with the quantize step written out in its forward (`step` swaps it, for a torch
    reference with the fused kernel in its place)."""

    def __init__(self, features: int = 16, hidden: int = 32, outputs: int = 4,
                 step=quantize) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(features, hidden)
        self.fc2 = torch.nn.Linear(hidden, outputs)
        self.step = step

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.step(self.fc1(x)) / 12.5)
