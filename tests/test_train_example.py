"""examples/train_mlp.py trains, and follows the PyTorch twin of the same network."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_mlp.py"


def load_example():
    spec = importlib.util.spec_from_file_location("train_mlp", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_mlp"] = module  # MindSpore's graph parser looks modules up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mode, steps", [("graph", 200), ("pynative", 40)])
def test_mlp_loss_falls_and_matches_pytorch(mode, steps):
    bridged, reference = load_example().main(["--steps", str(steps), "--mode", mode])
    assert bridged[-1] < 0.5 * bridged[0]
    for step, (b, r) in enumerate(zip(bridged, reference, strict=True)):
        assert abs(b - r) <= 1e-4 * abs(r), f"step {step}: ms_aten {b} vs torch {r}"
