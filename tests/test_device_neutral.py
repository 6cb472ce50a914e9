"""A captured program carries no device of its own, and its launches read nothing back to the host
(issue 57): the device constants torch.export writes into a graph captured on the CPU (arange's,
_to_copy's, new_zeros', _assert_tensor_metadata's) become the launch's device (csrc/op/spec.h, L),
and a forward and backward make no host read (ms_aten.host_read_count), which on a GPU would wait
for the stream. The GPU side runs in scripts/gpu_check.sh."""
from __future__ import annotations

import copy
import re

import mindspore as ms
import numpy as np
import pytest
import torch
from aot_launcher.make_cases import gpt2
from loss_cell import SumOf

import ms_aten

from common import run, set_mode, to_ms, to_torch

# A device constant among a node's op arguments: d<%-escaped device> (csrc/op/spec.h).
DEVICE_TOKEN = re.compile(r"^d[a-z%]")


class PositionsAndDropout(torch.nn.Module):
    """Position ids from arange, tensors made on the input's device in three spellings, and
    dropout in train mode (a random program)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(20, 8)
        self.positions = torch.nn.Embedding(16, 8)
        self.out = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        h = self.tokens(ids) + self.positions(positions)
        bias = torch.full((8,), 0.5, device=ids.device) + ids.new_zeros(8).float()
        h = self.drop(h + bias.to(ids.device))
        return self.out(h).tanh()


def node_lines(spec: str) -> list[str]:
    return [line for line in spec.splitlines() if line.startswith("n ")]


def device_constants(lines: list[str]) -> list[str]:
    """The nodes with a device constant: `n <results> <label> call <op> <overload> <count>`,
    then the op's arguments."""
    return [line for line in lines if any(DEVICE_TOKEN.match(t) for t in line.split()[7:])]


@pytest.fixture(scope="module")
def captured() -> tuple[torch.nn.Module, ms_aten.TorchModule]:
    torch.manual_seed(0)
    model = PositionsAndDropout().train()
    cell = ms_aten.module(copy.deepcopy(model), (torch.randint(0, 20, (2, 6)),))
    return model, cell


def test_a_captured_program_holds_no_device_constant(captured):
    program = captured[1].program
    assert program.random
    for spec in (program.spec, program.vjp_spec):
        lines = node_lines(spec)
        assert not device_constants(lines)
        # arange and full took the launch's device
        for op in ("arange", "full"):
            assert any(f"call aten::{op} " in line and " L " in line for line in lines), op


def test_gpt2_s_program_holds_no_device_constant():
    """The program scripts/gpu_check.sh carries: its arange and _assert_tensor_metadata took the
    capture's device before, and its attention made it random."""
    model, tokens = gpt2()
    program = ms_aten.module(model, kwargs={"input_ids": tokens}).program
    # eval mode: attention's dropout_p is 0, so no RNG state for a device's backward to read
    assert not program.random
    lines = node_lines(program.spec)
    assert not device_constants(lines)
    assert any(" L " in line for line in lines)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_a_forward_and_backward_read_nothing_back(captured, mode):
    """Values and gradients are torch's for the same seed (the dropout mask replayed), and the
    launches made no host read."""
    model, cell = captured
    set_mode(mode)
    grad_fn = ms.value_and_grad(SumOf(cell), None, cell.trainable_params())
    ids = torch.randint(0, 20, (2, 6))
    before = ms_aten.host_read_count()
    launches = ms_aten.launch_count()
    for step in range(2):
        torch.manual_seed(step)
        value, grads = grad_fn(to_ms(ids))
        got = [to_torch(g).numpy() for g in grads]
        torch.manual_seed(step)
        model.zero_grad()
        loss = model(ids).sum()
        loss.backward()
        np.testing.assert_allclose(float(value), loss.item(), rtol=1e-5)
        for g, (name, p) in zip(got, model.named_parameters(), strict=True):
            np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert ms_aten.launch_count() - launches >= 4  # a forward and a backward per step
    assert ms_aten.host_read_count() - before == 0


def scaled_by_its_max(x: torch.Tensor) -> torch.Tensor:
    return x * x.max().item()  # a number read from a tensor: on a GPU, a wait for the stream


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_a_host_read_is_counted(mode):
    """The counter sees a read where a launch makes one: a program that reads a number from a
    tensor (its .item(), torch's _local_scalar_dense), once per call."""
    x = torch.tensor([[0.0, 1.5], [2.0, 0.0]])
    fn = ms_aten.function(scaled_by_its_max, (x,))
    for _ in range(2):
        before = ms_aten.host_read_count()
        got = run(fn, (to_ms(x),), mode)
        torch.testing.assert_close(to_torch(got), scaled_by_its_max(x))
        assert ms_aten.host_read_count() - before == 1
