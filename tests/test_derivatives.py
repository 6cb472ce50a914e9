"""Ops torch registers no autograd kernel for. torch's autograd fallback serves them: where the
kernel records no history (oneDNN's mkldnn:: inference ops, a kernel that runs under no_grad)
it only warns and passes zeros back, so ms_aten refuses a gradient through them by name, as an
op and inside a program, in both modes; where the kernel's own torch ops record one (a Python
kernel), the gradients are torch's. Forwards serve inference either way, gradients that do not
pass through such an op stay torch's, and nothing is left behind."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from loss_cell import SumOf
from test_saved_graph import _parked_before, parked  # noqa: F401  (the fixture too)

import ms_aten

from common import MODES, OpCell, assert_same, randn, run, set_mode, to_ms

REFUSAL = r"torch registers no autograd kernel for {ops}, which the gradient passes through"
TWICE = REFUSAL.format(ops=r"ms_aten_no_grad::twice \(node 1\)")  # in through_twice


def _twice_untracked(x):
    with torch.no_grad():  # as a C++ kernel computes: autograd sees nothing
        return x * 2


@pytest.fixture(scope="module", autouse=True)
def library_ops():
    """ms_aten_no_grad::twice (its kernel records no history) and ::twice_traced (its kernel's
    torch ops do): CPU and Meta kernels, no derivative registered."""
    lib = torch.library.Library("ms_aten_no_grad", "DEF")
    for op, kernel in (("twice", _twice_untracked), ("twice_traced", lambda x: x * 2)):
        lib.define(f"{op}(Tensor x) -> Tensor")
        lib.impl(op, kernel, "CPU")
        lib.impl(op, torch.empty_like, "Meta")
    yield
    lib._destroy()


def linear(x, weight, bias):
    return F.linear(x, weight, bias)


def onednn_linear(x, weight, bias):
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def assert_gradients_still_work(mode: str) -> None:
    x = randn(4)
    set_mode(mode)
    got = ms.grad(SumOf(ms_aten.op("tanh")))(to_ms(x))
    np.testing.assert_allclose(got.asnumpy(), 1 - x.tanh() ** 2, rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name, constants, inputs, reference", [
    ("mkldnn::_linear_pointwise", {"attr": "none", "scalars": [], "algorithm": ""},
     (randn(3, 8), randn(5, 8), randn(5)), F.linear),
    ("ms_aten_no_grad::twice", {}, (randn(3, 4),), lambda x: x * 2),
], ids=["onednn", "library"])
def test_an_op_refuses_a_gradient_torch_cannot_give(mode, name, constants, inputs, reference):
    op = ms_aten.op(name, **constants)
    assert_same(run(op, to_ms(inputs), mode), reference(*inputs), rtol=1e-5, atol=1e-5)
    set_mode(mode)
    with pytest.raises(RuntimeError, match=rf"{name}( \(backward\))?: "
                                           rf"{REFUSAL.format(ops=name)}"):
        ms.grad(OpCell(op), grad_position=tuple(range(len(inputs))))(*to_ms(inputs))[0].asnumpy()
    assert_same(run(op, to_ms(inputs), mode), reference(*inputs), rtol=1e-5, atol=1e-5)
    assert_gradients_still_work(mode)


@pytest.mark.parametrize("mode", MODES)
def test_an_op_whose_kernel_records_its_history_has_torch_s_gradient(mode):
    x = randn(3, 4)
    set_mode(mode)
    # torch warns ("an autograd kernel was not registered"), on stderr from the launch thread
    got = ms.grad(SumOf(ms_aten.op("ms_aten_no_grad::twice_traced")))(to_ms(x))
    np.testing.assert_array_equal(got.asnumpy(), np.full((3, 4), 2, np.float32))


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


@pytest.fixture(scope="module")
def onednn_mlp():
    """An MLP whose linears replace= puts on oneDNN: its forward is torch's, its training is
    refused."""
    torch.manual_seed(0)
    mlp, x = Mlp(), randn(2, 8)
    examples = (x, randn(16, 8), randn(16))
    return mlp, x, ms_aten.module(mlp, (x,), replace=[(linear, onednn_linear, examples)])


@pytest.mark.parametrize("mode", MODES)
def test_a_module_refuses_training_through_an_op_without_a_derivative(mode, onednn_mlp):
    mlp, x, cell = onednn_mlp
    assert cell.program.replaced == 2
    set_mode(mode)
    assert_same(cell(to_ms(x)), mlp(x), rtol=1e-5, atol=1e-5)
    grad = ms.value_and_grad(SumOf(cell), None, cell.trainable_params())
    nodes = r"mkldnn::_linear_pointwise \(node \d+\)"
    with pytest.raises(RuntimeError, match=rf"Mlp( \(backward\))?: "
                                           rf"{REFUSAL.format(ops=f'{nodes}, {nodes}')}"
                                           rf"(.|\n)*replace="):
        grad(to_ms(x))[1][0].asnumpy()
    assert parked() == 0  # the kept graph went with the refused backward
    cell.set_train(False)
    assert_same(cell(to_ms(x)), mlp(x), rtol=1e-5, atol=1e-5)
    cell.set_train(True)
    assert_gradients_still_work(mode)


class ScaledByBuffer(torch.nn.Module):
    """The op without a derivative reads a buffer, a frozen weight and integer ids, which no
    gradient reaches: training goes on, with torch's gradients."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.frozen = torch.nn.Parameter(torch.randn(3), requires_grad=False)
        self.register_buffer("scale", torch.randn(3))

    def forward(self, x, ids):
        twice = torch.ops.ms_aten_no_grad.twice
        return (self.linear(x) * twice(self.scale) + twice(self.frozen)) * twice(ids).float()


class SumOfTwo(ms.nn.Cell):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def construct(self, x, ids):
        return self.f(x, ids).sum()


@pytest.mark.parametrize("mode", MODES)
def test_gradients_that_do_not_pass_through_it_are_torch_s(mode):
    torch.manual_seed(1)
    model = ScaledByBuffer()
    x, ids = randn(2, 4), torch.tensor([[1], [2]])
    cell = ms_aten.module(model, (x, ids))
    set_mode(mode)
    loss, grads = ms.value_and_grad(SumOfTwo(cell), 0, cell.trainable_params())(*to_ms((x, ids)))
    leaf = x.clone().requires_grad_()
    model(leaf, ids).sum().backward()
    np.testing.assert_allclose(loss.asnumpy(), model(x, ids).sum().item(), rtol=1e-5)
    expected = [leaf.grad, model.linear.weight.grad, model.linear.bias.grad]
    for got, want in zip([grads[0], *grads[1]], expected, strict=True):
        np.testing.assert_allclose(got.asnumpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def through_twice(x):
    return torch.ops.ms_aten_no_grad.twice(x.sin()).cos()


def through_twice_traced(x):
    return torch.ops.ms_aten_no_grad.twice_traced(x.sin()).cos()


@pytest.mark.parametrize("mode", MODES)
def test_a_function_refuses_a_gradient_through_it_and_keeps_one_its_kernel_records(mode):
    x = randn(5)
    refused = ms_aten.function(through_twice, (x,))
    assert_same(run(refused, to_ms((x,)), mode), through_twice(x))
    set_mode(mode)
    with pytest.raises(RuntimeError, match=rf"through_twice( \(backward\))?: {TWICE}"):
        ms.grad(SumOf(refused))(to_ms(x)).asnumpy()
    assert parked() == 0
    traced = ms_aten.function(through_twice_traced, (x,))
    leaf = x.clone().requires_grad_()
    (2 * leaf.sin()).cos().sum().backward()
    got = ms.grad(SumOf(traced))(to_ms(x))
    np.testing.assert_allclose(got.asnumpy(), leaf.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert_gradients_still_work(mode)


def test_compile_runs_a_backward_through_it_interpreted():
    """AOTAutograd would compile the fallback's zeros into the backward: compile= declines,
    and the interpreted program refuses the gradient."""
    x = randn(5)
    with pytest.warns(ms_aten.CompileWarning, match=r"through_twice: compile=True runs it "
                                                    r"interpreted: torch registers no autograd "
                                                    r"kernel for ms_aten_no_grad::twice"):
        function = ms_aten.function(through_twice, (x,), compile=True)
    assert function.program.compiled is None
    set_mode("pynative")
    with pytest.raises(RuntimeError, match=TWICE):
        ms.grad(SumOf(function))(to_ms(x)).asnumpy()
