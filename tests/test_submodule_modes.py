"""Each submodule keeps its own train/eval mode (a frozen BatchNorm backbone, an eval-mode Dropout
in a train-mode model), against torch eager: values, every gradient by name, the running
statistics after each call, MindSpore's training wrapper, and set_train back and forth."""
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


class Net(torch.nn.Module):
    """Conv -> BatchNorm -> ReLU backbone, a BatchNorm + Dropout + Linear head."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                            torch.nn.ReLU())
        self.head = torch.nn.Sequential(torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                        torch.nn.Dropout(p), torch.nn.Linear(4 * 4 * 4, 3))

    def forward(self, x):
        return self.head(self.backbone(x))


def frozen_backbone(p: float = 0.0) -> torch.nn.Module:
    """The fine-tuning idiom: the model in train mode, its backbone in eval mode, with running
    statistics that are not the defaults (so that using batch statistics shows)."""
    torch.manual_seed(0)
    net = Net(p)
    with torch.no_grad():
        for bn in (net.backbone[1], net.head[0]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    net.train()
    net.backbone.eval()
    return net


X = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1))


class Summed(nn.Cell):
    """(net(x) * [0, 1, .., n-1]).sum(): every output weighted differently."""

    def __init__(self, net, n: int = 3):
        super().__init__()
        self.net = net
        self.weights = ms.Tensor(np.arange(n, dtype=np.float32))

    def construct(self, x):
        return (self.net(x) * self.weights).sum()


def torch_grads(module: torch.nn.Module, x: torch.Tensor) -> tuple[float, dict, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    module.zero_grad()
    value = (module(x) * torch.arange(3.0)).sum()
    value.backward()
    return value.item(), {n: p.grad.clone() for n, p in module.named_parameters()}, x.grad


def assert_state_matches(cell: ms_aten.TorchModule, module: torch.nn.Module) -> None:
    weights = {p.name.split("net.")[-1]: p for p in cell.weights}
    for name, expected in module.named_buffers():
        torch.testing.assert_close(to_torch(weights[name].value()), expected, rtol=1e-5,
                                   atol=1e-6, msg=name)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_frozen_backbone_value_gradients_and_statistics(mode):
    net = frozen_backbone()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(net), (X,))
    assert cell.training
    # Only the head's BatchNorm updates statistics; the frozen one is read, never written.
    assert cell.program.mutations == ("head.0.running_mean", "head.0.running_var",
                                      "head.0.num_batches_tracked")
    grad_fn = ms.value_and_grad(Summed(cell), 0, cell.trainable_params())
    for _ in range(2):
        value, (dx, grads) = grad_fn(to_ms(X))
        want, want_grads, want_dx = torch_grads(net, X)
        assert float(value) == pytest.approx(want, rel=1e-5)
        np.testing.assert_allclose(dx.asnumpy(), want_dx.numpy(), rtol=1e-4, atol=1e-5)
        for grad, param in zip(grads, cell.trainable_params(), strict=True):
            name = param.name.split("net.")[-1]
            np.testing.assert_allclose(grad.asnumpy(), want_grads[name].numpy(), rtol=1e-4,
                                       atol=1e-5, err_msg=name)
        assert_state_matches(cell, net)
    assert not net.backbone.training and net.head.training  # the capture left torch's modes


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_an_eval_mode_dropout_in_a_train_mode_model_does_not_drop(mode):
    net = frozen_backbone(p=0.9)
    net.head[2].eval()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(net), (X,))
    assert not cell.program.random
    first, second = (cell(to_ms(X)).asnumpy() for _ in range(2))
    # The head's BatchNorm in train mode normalizes by the batch, as torch's does each call.
    np.testing.assert_allclose(first, net(X).detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(second, net(X).detach().numpy(), rtol=1e-4, atol=1e-5)


def train_like_torch(cell: ms_aten.TorchModule, module: torch.nn.Module, x: torch.Tensor,
                     steps: int, lr: float, rtol: float) -> None:
    """`steps` of MindSpore's TrainOneStepCell + nn.SGD (it calls set_train(True), as every
    MindSpore training wrapper) against torch's SGD: the losses, then every weight and
    statistic."""
    classes = cell.program.output_shapes[0][-1]
    step = nn.TrainOneStepCell(Summed(cell, classes),
                               nn.SGD(cell.trainable_params(), learning_rate=lr))
    step.set_train(True)
    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    for _ in range(steps):
        value = float(step(to_ms(x)))
        optimizer.zero_grad()
        want = (module(x) * torch.arange(float(classes))).sum()
        want.backward()
        optimizer.step()
        assert value == pytest.approx(want.item(), rel=rtol, abs=rtol / 10)
    state = cell.torch_state_dict()
    for name, expected in module.state_dict().items():
        torch.testing.assert_close(state[name], expected, rtol=rtol, atol=rtol / 10, msg=name)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_train_one_step_cell_keeps_the_backbone_frozen(mode):
    net = frozen_backbone()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(net), (X,))
    train_like_torch(cell, net, X, steps=3, lr=0.1, rtol=1e-4)


def test_set_train_back_and_forth_and_changing_a_submodule():
    net = frozen_backbone()
    set_mode("pynative")
    cell = ms_aten.module(copy.deepcopy(net), (X,))
    reference = copy.deepcopy(net)

    def check(torch_module):
        np.testing.assert_allclose(cell(to_ms(X)).asnumpy(),
                                   torch_module(X).detach().numpy(), rtol=1e-4, atol=1e-5)
        assert_state_matches(cell, torch_module)

    cell.set_train(False)
    check(copy.deepcopy(reference).eval())
    cell.set_train(True)  # the backbone stays frozen
    check(reference)
    # torch's reference.backbone.train(): the backbone's statistics move from now on.
    cell.set_submodule_train("backbone", True)
    reference.backbone.train()
    check(reference)
    assert len(cell._functions) == 3  # eval, frozen, all train: each captured once
    with pytest.raises(KeyError, match="no submodule 'backbon'"):
        cell.set_submodule_train("backbon")


def test_a_root_captured_in_eval_mode_trains_every_submodule():
    net = frozen_backbone().eval()
    set_mode("pynative")
    cell = ms_aten.module(copy.deepcopy(net), (X,))
    cell.set_train(True)  # torch's model.train()
    np.testing.assert_allclose(cell(to_ms(X)).asnumpy(), net.train()(X).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    assert_state_matches(cell, net)


def test_a_new_wrapper_keeps_the_eval_model_inside_it():
    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x) * 2

    net = frozen_backbone().eval()
    wrapper = Wrap(copy.deepcopy(net))  # in train mode, as every new Module
    set_mode("pynative")
    cell = ms_aten.module(wrapper, (X,))
    assert not cell.program.mutations  # nothing in the eval model updates statistics
    np.testing.assert_allclose(cell(to_ms(X)).asnumpy(), (net(X) * 2).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


class Block(torch.nn.Module):
    """torchvision's BasicBlock (torchvision does not install beside torch 2.13's CPU wheel)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.downsample = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride, bias=False),
                                              torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.downsample(x))


def resnet(classes: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, 1, 1, bias=False),
                               torch.nn.BatchNorm2d(8), torch.nn.ReLU(), Block(8, 16, 2),
                               Block(16, 16, 2), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(16, classes))


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_resnet_with_frozen_batchnorms_and_a_new_head_trains_like_torch(mode):
    torch.manual_seed(0)
    model = resnet(4)
    model.train()
    for m in model.modules():  # every BatchNorm frozen, as detection fine-tuning does
        if isinstance(m, torch.nn.BatchNorm2d):
            m.eval()
    x = torch.randn(2, 3, 16, 16)
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(model), (x,))
    assert not cell.program.mutations
    train_like_torch(cell, model, x, steps=5, lr=0.01, rtol=1e-3)
