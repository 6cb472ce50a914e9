"""In-place writes under no_grad to a tensor that requires grad (the in-place straight-through
idiom, `with torch.no_grad(): h.clamp_(-0.1, 0.1)`), or through `h.detach()`, in each
spelling: torch's values (later uses read the written values) and torch's gradients (the write
invisible to autograd), or a refusal naming the construct. Both modes, the output and every
gradient against torch eager."""
from __future__ import annotations

import copy

import mindspore as ms
import numpy as np
import pytest
import torch
from mindspore import nn

import ms_aten
from ms_aten import to_ms
from ms_aten.programs.base import CaptureError

from common import MODES, set_mode


@torch.no_grad()
def _clip(h):
    h.clamp_(-0.1, 0.1)


def _write(c: str, h: torch.Tensor) -> None:
    """The write of construct `c` to h (all of them under grad-disabled regions)."""
    if c == "clamp_":
        with torch.no_grad():
            h.clamp_(-0.1, 0.1)
    elif c == "copy_":
        with torch.no_grad():
            h.copy_(torch.round(h * 4) / 4)
    elif c == "mul_":
        with torch.no_grad():
            h.mul_(0.5)
    elif c == "slice_assignment":
        with torch.no_grad():
            h[:, 1:3] = 0.0
        h[0].clamp_(-1, 1)  # a view of it taken after the write, written with its derivative
    elif c == "mask_assignment":
        with torch.no_grad():
            h[h > 0.2] = 0.2
    elif c == "a_row_written":
        with torch.no_grad():
            h[1].mul_(-3)
    elif c == "through_detach":  # no no_grad: the write is invisible to autograd as well
        h.detach().clamp_(-0.1, 0.1)
    elif c == "through_detach_under_no_grad":
        with torch.no_grad():
            h.detach().mul_(2)
    elif c == "decorated_helper":
        _clip(h)
    elif c == "set_grad_enabled":
        with torch.set_grad_enabled(False):
            h.clamp_(-0.1, 0.1)
    elif c == "two_writes_and_a_read_between":
        with torch.no_grad():
            h.clamp_(-0.1, 0.1)
        h.add_(h * 0.5)  # grad-enabled, in between: torch's derivative of this one
        with torch.no_grad():
            h.mul_(2)
    else:
        raise AssertionError(c)


class Net(torch.nn.Module):
    def __init__(self, constructs: tuple[str, ...]) -> None:
        super().__init__()
        self.constructs = constructs
        self.lin = torch.nn.Linear(4, 4)
        self.out = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = self.lin(x)
        before = torch.tanh(h)  # read before the write: the old values
        for construct in self.constructs:  # one after the other, on the same tensor
            _write(construct, h)
        return self.out(h * h) + before[:, :3]


# Each group's writes in one forward (fewer captures); every spelling is in one group.
GROUPS = {"methods": ("copy_", "clamp_", "mul_"),
          "assignments": ("slice_assignment", "mask_assignment", "a_row_written"),
          "through_detach": ("through_detach", "through_detach_under_no_grad"),
          "regions": ("decorated_helper", "set_grad_enabled", "two_writes_and_a_read_between")}
X = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
WEIGHTS = torch.arange(1.0, 4.0)


class Weighted(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.weights = to_ms(WEIGHTS)

    def construct(self, x):
        return (self.net(x) * self.weights).sum()


def assert_matches_torch(cell: ms_aten.TorchModule, module: torch.nn.Module) -> None:
    """The output, the input's gradient and every parameter's, by name, against torch's."""
    x = X.clone().requires_grad_(True)
    out = module(x)
    (out * WEIGHTS).sum().backward()
    np.testing.assert_allclose(cell(to_ms(X)).asnumpy(), out.detach().numpy(), rtol=1e-6,
                               atol=1e-7)
    _, (dx, grads) = ms.value_and_grad(Weighted(cell), 0, cell.trainable_params())(to_ms(X))
    np.testing.assert_allclose(dx.asnumpy(), x.grad.numpy(), rtol=1e-5, atol=1e-6)
    expected = dict(module.named_parameters())
    assert len(grads) == len(expected)
    for grad, param in zip(grads, cell.trainable_params(), strict=True):
        name = param.name.split("net.")[-1]
        assert expected[name].grad is not None and expected[name].grad.abs().sum() > 0, name
        np.testing.assert_allclose(grad.asnumpy(), expected[name].grad.numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("group", list(GROUPS))
def test_a_write_under_no_grad_keeps_torch_s_value_and_gradients(group, mode):
    torch.manual_seed(0)
    module = Net(GROUPS[group])
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (X,))
    assert_matches_torch(cell, module)


class Normalized(torch.nn.Module):
    """Weight normalization in place, inside forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.div_(self.lin.weight.norm(dim=1, keepdim=True))
        return self.lin(x)


class Refused(torch.nn.Module):
    def __init__(self, construct: str) -> None:
        super().__init__()
        self.construct = construct
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if self.construct == "view_written":
            row = h[0]
            with torch.no_grad():
                row.clamp_(-0.1, 0.1)
        elif self.construct == "view_read_after":
            row = h[0]
            with torch.no_grad():
                h.clamp_(-0.1, 0.1)
            return h * row
        elif self.construct == "view_handed_on":
            with torch.no_grad():
                h.clamp_(-0.1, 0.1)
                row = h[0]
            return h * row
        elif self.construct == "read_between_detached_writes":
            alias = h.detach()
            alias.clamp_(-0.1, 0.1)
            doubled = h * 2
            alias.mul_(2)
            return h + doubled
        elif self.construct == "input_written":
            with torch.no_grad():
                x.mul_(2)
        return h


@pytest.mark.parametrize("module, message", [
    (Normalized(), r"Normalized writes its parameter 'lin.weight' in place in forward"),
    (Refused("view_written"), r"Refused: an in-place write under no_grad to a view of another "
                              r"tensor \(File .*test_no_grad_inplace.py\", line \d+"),
    (Refused("view_read_after"), r"whose views, taken before it, are read after it"),
    (Refused("view_handed_on"), r"of which the no_grad block hands a view on"),
    (Refused("read_between_detached_writes"), r"an in-place write through .detach\(\) \(File "
                                              r".*\) to a tensor read between it and a later"),
    (Refused("input_written"), r"Refused writes its input x in place"),
], ids=["parameter", "view_written", "view_read_after", "view_handed_on",
        "read_between_detached_writes", "input_written"])
def test_what_cannot_keep_torch_s_meaning_is_refused_by_name(module, message):
    with pytest.raises(CaptureError, match=message):
        ms_aten.module(module, (X,))
