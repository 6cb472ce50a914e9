"""ms_aten.module(..., verify=): torch eager beside the first calls. A correct model passes in
both modes (values, then gradients given the same incoming gradients); a program planted with
a wrong gradient (a replace= that detaches a weight: the same values, no gradient) is named by
its weight, one planted with a wrong value by its output; the environment variable turns it on;
after its calls the Cell runs as without it."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
from mindspore import nn

import ms_aten
from ms_aten import to_ms

from common import MODES, set_mode


class Net(torch.nn.Module):
    """Two outputs in a dict (named by their paths), a BatchNorm whose statistics move, and a
    Dropout (the reference draws what the program drew)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.drop = torch.nn.Dropout(0.3)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x, scale):
        h = self.drop(torch.relu(self.bn(self.lin(x))))
        return {"logits": self.out(h) * scale, "hidden": (h.sum(-1),)}


X = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
SCALE = torch.tensor(1.5)


class Loss(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x, scale):
        out = self.net(x, scale)
        return (out["logits"] * out["logits"]).sum() + out["hidden"][0].sum()


def _cell(mode: str, **kwargs) -> ms_aten.TorchModule:
    torch.manual_seed(0)
    set_mode(mode)
    return ms_aten.module(Net(), (X, SCALE), **kwargs)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_correct_model_passes_calls_and_training_steps(mode):
    cell = _cell(mode, verify=2)
    verifier = cell._verifier
    step = nn.TrainOneStepCell(Loss(cell), nn.SGD(cell.trainable_params(), learning_rate=0.1))
    step.set_train(True)
    for _ in range(3):  # the third is past the verified two
        step(to_ms(X), to_ms(SCALE))
    assert verifier.done == 2 and verifier.backwards == 0


def _linear_without_weight_gradient(x, w, b):
    return torch.nn.functional.linear(x, w.detach(), b)


def _linear(x, w, b):
    return torch.nn.functional.linear(x, w, b)


def _relu(x):
    return torch.relu(x)


def _relu_off(x):
    return torch.relu(x) * 1.001


@pytest.mark.parametrize("mode", list(MODES))
def test_a_planted_wrong_gradient_is_named_by_its_weight(mode):
    cell = _cell(mode, verify=True, replace=[
        (_linear, _linear_without_weight_gradient,
         (torch.randn(6, 8), torch.randn(3, 8), torch.randn(3)))])
    assert cell.program.replaced == 2  # both Linears: their weights have no gradient now
    grad = ms.value_and_grad(Loss(cell), None, cell.trainable_params())
    with pytest.raises(ms_aten.VerificationError,
                       match=r"ms_aten.module\(Net\) verified against torch eager, call 1, "
                             r"backward: the gradient of weight 'lin.weight' differs"):
        grad(to_ms(X), to_ms(SCALE))


@pytest.mark.parametrize("mode", list(MODES))
def test_a_planted_wrong_value_is_named_by_its_output(mode):
    cell = _cell(mode, verify=True, replace=[(_relu, _relu_off)])
    with pytest.raises(ms_aten.VerificationError,
                       match=r"call 1: output \['logits'\] differs from torch eager's: \d+ of "
                             r"18 elements differ"):
        cell(to_ms(X), to_ms(SCALE))


def test_the_environment_variable_turns_it_on_at_the_call(monkeypatch):
    monkeypatch.setenv("MS_ATEN_VERIFY", "1")
    assert _cell("pynative")._verifier.calls == 1
    monkeypatch.setenv("MS_ATEN_VERIFY", "true")
    assert _cell("pynative")._verifier.calls == 3
    monkeypatch.setenv("MS_ATEN_VERIFY", "0")
    assert _cell("pynative")._verifier is None
    assert _cell("pynative", verify=False)._verifier is None
    monkeypatch.setenv("MS_ATEN_VERIFY", "sometimes")
    with pytest.raises(ValueError, match="MS_ATEN_VERIFY='sometimes'"):
        _cell("pynative")


def test_past_its_calls_a_pynative_cell_takes_the_fast_path_again():
    cell = _cell("pynative", verify=1)
    cell.set_train(False)
    first = cell(to_ms(X), to_ms(SCALE))["logits"].asnumpy()
    assert not cell.primitive.verifier.active
    np.testing.assert_allclose(cell(to_ms(X), to_ms(SCALE))["logits"].asnumpy(), first)
