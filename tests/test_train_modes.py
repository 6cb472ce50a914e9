"""set_train(True) / set_train(False) give the tree of modes torch's model.train() /
model.eval() give, the module's own train() override included: mmdet's `norm_eval` backbone
(BatchNorm kept in eval mode by train()), captured in eval mode, then trained; an override that
freezes a Dropout; one that keeps a Dropout on in eval mode. Outputs, gradients and running
statistics against torch eager after each step, both modes."""
from __future__ import annotations

import copy

import mindspore as ms
import numpy as np
import pytest
import torch
from mindspore import nn

import ms_aten
from ms_aten import to_ms, to_torch

from common import set_mode


class Backbone(torch.nn.Module):
    """mmcv/mmdet's ResNet idiom: `norm_eval` keeps every BatchNorm in eval mode in train()."""

    def __init__(self, norm_eval: bool = True) -> None:
        super().__init__()
        self.norm_eval = norm_eval
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.BatchNorm1d(64),
                                        torch.nn.Linear(64, 3))
        with torch.no_grad():
            for bn in (self.bn, self.head[1]):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 2.0)

    def train(self, mode: bool = True) -> Backbone:
        super().train(mode)
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))))


class FrozenDropout(torch.nn.Module):
    """An override that keeps its Dropout off in training (p=0.9 would show)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.drop = torch.nn.Dropout(0.9)
        self.bn = torch.nn.BatchNorm1d(3)

    def train(self, mode: bool = True) -> FrozenDropout:
        super().train(mode)
        self.drop.eval()
        return self

    def forward(self, x):
        return self.bn(self.drop(self.lin(x)))


class McDropout(FrozenDropout):
    """Monte-Carlo dropout: eval() keeps the Dropout drawing."""

    def train(self, mode: bool = True) -> McDropout:
        torch.nn.Module.train(self, mode)
        self.drop.train()
        return self


X = torch.randn(6, 3, 6, 6, generator=torch.Generator().manual_seed(1))


class Summed(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x):
        return (self.net(x) * ms.Tensor(np.arange(1.0, 4.0, dtype=np.float32))).sum()


def assert_steps_match(cell: ms_aten.TorchModule, module: torch.nn.Module, x: torch.Tensor,
                       steps: int = 2) -> None:
    """`steps` of MindSpore's TrainOneStepCell + SGD against torch's, in the mode each is in:
    the losses, then every weight and running statistic."""
    step = nn.TrainOneStepCell(Summed(cell), nn.SGD(cell.trainable_params(), learning_rate=0.1))
    step.set_train(cell.training)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    for _ in range(steps):
        value = float(step(to_ms(x)))
        optimizer.zero_grad()
        want = (module(x) * torch.arange(1.0, 4.0)).sum()
        want.backward()
        optimizer.step()
        assert value == pytest.approx(want.item(), rel=1e-4, abs=1e-5)
    state = cell.torch_state_dict()
    for name, expected in module.state_dict().items():
        torch.testing.assert_close(state[name], expected, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_norm_eval_backbone_captured_in_eval_mode_trains_as_torch(mode):
    torch.manual_seed(0)
    net = Backbone().eval()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(net), (X,))
    assert not cell.training
    cell.set_train(True)  # torch's net.train(): the BatchNorms stay in eval mode
    assert not cell.program.mutations  # no running statistic moves
    net.train()
    assert not net.bn.training
    assert_steps_match(cell, net, X)
    cell.set_train(False)  # torch's net.eval()
    net.eval()
    np.testing.assert_allclose(cell(to_ms(X)).asnumpy(), net(X).detach().numpy(), rtol=1e-4,
                               atol=1e-5)


def test_the_override_runs_on_the_module_whose_modes_and_flags_come_back():
    net = Backbone().eval()
    net.conv.weight.requires_grad_(False)
    before = {name: m.training for name, m in net.named_modules()}
    set_mode("pynative")
    cell = ms_aten.module(net, (X,))
    assert {name: m.training for name, m in net.named_modules()} == before
    assert not net.conv.weight.requires_grad
    assert "conv.weight" not in {p.name for p in cell.trainable_params()}


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_without_norm_eval_the_statistics_move_as_torch_s(mode):
    torch.manual_seed(0)
    net = Backbone(norm_eval=False).eval()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(net), (X,)).set_train(True)
    assert "bn.running_mean" in cell.program.mutations
    assert_steps_match(cell, net.train(), X)


XS = torch.randn(5, 4, generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_an_override_that_freezes_a_dropout(mode):
    torch.manual_seed(0)
    net = FrozenDropout().eval()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(net), (XS,)).set_train(True)
    assert not cell.program.random  # the Dropout is off in training too
    assert_steps_match(cell, net.train(), XS)


def test_an_override_that_keeps_a_dropout_on_in_eval_mode():
    torch.manual_seed(0)
    net = McDropout().train()
    x = torch.randn(64, 4)
    set_mode("pynative")
    cell = ms_aten.module(copy.deepcopy(net), (x,)).set_train(False)
    assert cell.program.random  # torch's net.eval() keeps the Dropout drawing
    assert not cell.program.mutations  # the BatchNorm is in eval mode
    out = to_torch(cell(to_ms(x)))
    dropped = (out == net.bn.eval()(torch.zeros(64, 3))).float().mean()
    assert 0.5 < dropped < 1.0  # most of p=0.9's units are dropped, not all
