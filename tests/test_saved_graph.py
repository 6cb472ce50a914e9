"""The backward of a whole program without a second forward: the forward keeps its autograd graph
for the VJP (csrc/program/saved.h), inference keeps none, and nothing stays behind."""
from __future__ import annotations

import copy
import ctypes

import mindspore as ms
import models
import numpy as np
import pytest
import torch
from loss_cell import LossCell, SumOf

import ms_aten
from ms_aten.native import library

from common import set_mode, to_ms, to_torch

CALLS: list[int] = []  # runs of counted's forward kernel


@torch.library.custom_op("ms_aten_saved_test::counted", mutates_args=())
def counted(x: torch.Tensor) -> torch.Tensor:
    """x * 2, counting its forward runs: a recomputing backward runs it once more."""
    CALLS.append(1)
    return x * 2


@counted.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


counted.register_autograd(lambda ctx, grad: grad * 2)


def _parked_in_process() -> int:
    lib = library.load()
    lib.ms_aten_parked_graphs.restype = ctypes.c_int64
    return int(lib.ms_aten_parked_graphs())


# The count is the process's: a kernel of an earlier test file's Cell that MindSpore's graph
# cache keeps alive may hold one graph parked by design (a forward that writes buffers keeps
# its graph from the first launch, dropped at its next launch or with the kernel).
_BEFORE = {"parked": 0}


@pytest.fixture(autouse=True)
def _parked_before() -> None:
    _BEFORE["parked"] = _parked_in_process()


def parked() -> int:
    """How many kept graphs wait for a backward, of those this test's kernels parked."""
    return _parked_in_process() - _BEFORE["parked"]


def sin_of_counted(x: torch.Tensor) -> torch.Tensor:
    return counted(x).sin()


@pytest.mark.parametrize("record", [True, False], ids=["kept_graph", "recompute"])
@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_the_backward_uses_the_forward_s_graph(mode, record):
    """With a kept graph the forward kernel runs once per gradient; recomputing, twice. The
    gradients are torch's either way, and no graph stays parked."""
    x = torch.randn(5, 3)
    fn = ms_aten.TorchFunction(ms_aten.AtenFunction(
        ms_aten.function(sin_of_counted, (x,)).program, record=record))
    set_mode(mode)
    grad_fn = ms.grad(SumOf(fn))
    grad_fn(to_ms(x)).asnumpy()  # compiles (GRAPH mode runs the fake kernel, not the forward)
    for _ in range(3):
        CALLS.clear()
        got = grad_fn(to_ms(x)).asnumpy()
        assert len(CALLS) == (1 if record else 2)
        leaf = x.clone().requires_grad_()
        sin_of_counted(leaf).sum().backward()
        np.testing.assert_allclose(got, leaf.grad.numpy(), rtol=1e-6)
    assert parked() == 0


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_inference_keeps_no_graph(mode):
    """An eval-mode module keeps nothing; a function's forward compiled without a backward keeps
    its first graph one call at most, then records no more."""
    c = models.gpt2()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(c.module), c.inputs)
    for _ in range(3):
        cell(to_ms(c.inputs[0]))["logits"].asnumpy()
        assert parked() == 0
    fn = ms_aten.function(sin_of_counted, (torch.randn(4),))
    for i in range(3):
        fn(to_ms(torch.randn(4))).asnumpy()
        assert parked() <= (1 if i == 0 else 0)
    del fn
    assert parked() == 0


def test_a_pruned_backward_leaves_nothing_behind():
    """ms.value_and_grad returning only the loss: MindSpore drops the backward, so the forward
    kernel's graph is never taken; it stops keeping one at its next launch."""
    c = models.gpt2()
    set_mode("graph")
    cell = ms_aten.module(copy.deepcopy(c.module), c.inputs).set_train()
    loss_cell = LossCell(cell, c.loss)
    grad_fn = ms.value_and_grad(loss_cell, None, cell.trainable_params())

    @ms.jit
    def loss_only(x, target):
        return grad_fn(x, target)[0]

    x, target = to_ms(c.inputs[0]), to_ms(c.target)
    for _ in range(3):
        loss_only(x, target).asnumpy()
    assert parked() == 0


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_training_with_the_kept_graph_follows_torch(mode):
    """Dropout in train mode: the kept graph holds the forward's mask, so the gradients are
    torch's for the same seed, step after step, and no graph stays parked."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Dropout(0.5),
                                 torch.nn.Linear(6, 2)).train()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (torch.randn(4, 6),))
    grad_fn = ms.value_and_grad(SumOf(cell), None, cell.trainable_params())
    for step in range(3):
        x = torch.randn(4, 6)
        torch.manual_seed(step)
        value, grads = grad_fn(to_ms(x))
        float(value)
        torch.manual_seed(step)
        module.zero_grad()
        module(x).sum().backward()
        for got, (name, p) in zip(grads, module.named_parameters(), strict=True):
            np.testing.assert_allclose(to_torch(got).numpy(), p.grad.numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=name)
    assert parked() == 0


class LinearThenCounted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return counted(self.linear(x)).sin()


@pytest.mark.parametrize("train", [True, False], ids=["train_mode", "eval_mode"])
@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_a_module_differentiated_in_either_mode_keeps_its_graph(mode, train):
    """An eval-mode module under a gradient (fine-tuning without dropout, a saliency map) is not
    inference: its forward runs once per gradient, as in train mode."""
    set_mode(mode)
    cell = ms_aten.module(LinearThenCounted().train(train), (torch.randn(3, 4),))
    grad_fn = ms.value_and_grad(LossCell(cell, "mse"), None, cell.trainable_params())
    if mode == "graph":
        grad_fn = ms.jit(grad_fn)
    x, target = to_ms(torch.randn(3, 4)), to_ms(torch.randn(3, 4))
    grad_fn(x, target)[0].asnumpy()  # GRAPH mode: the first backward marks the kernel
    for _ in range(3):
        CALLS.clear()
        grad_fn(x, target)[0].asnumpy()
        assert len(CALLS) == 1
    assert parked() == 0


class NoneForTheSecond(torch.autograd.Function):
    """x + u whose backward gives u no gradient (None): autograd then hands u's AccumulateGrad
    an undefined gradient."""

    @staticmethod
    def forward(ctx, x, u):
        return x + u

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def gradient_paths(x, w, u, idx):
    """Each way a gradient reaches an input: x by two paths (summed), w's as a broadcast (an
    expanded tensor) and as the incoming gradient itself (add passes it on unchanged), u's as
    None (a Function's backward) or nowhere (a mask), idx an integer input."""
    y = NoneForTheSecond.apply((x * w.sum() + x) * (u > 0), u).index_select(0, idx)
    return y, w + 1


class SquaredSums(ms.nn.Cell):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def construct(self, x, w, u, idx):
        y, v = self.fn(x, w, u, idx)
        return y.sum() + (v * v).sum()


@pytest.mark.parametrize("record", [True, False], ids=["kept_graph", "recompute"])
@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_each_gradient_lands_once_in_its_buffer(mode, record):
    """The VJP writes each gradient into MindSpore's buffer as autograd accumulates it and zeroes
    the buffers no gradient reaches: torch's gradients call after call (nothing left from the
    call before), for every way a gradient arrives."""
    example = (torch.randn(4, 3), torch.randn(3), torch.randn(4, 3), torch.tensor([2, 0, 3]))
    fn = ms_aten.TorchFunction(ms_aten.AtenFunction(
        ms_aten.function(gradient_paths, example).program, record=record))
    set_mode(mode)
    grad_fn = ms.grad(SquaredSums(fn), grad_position=(0, 1, 2))
    for _ in range(3):
        x, w, u = torch.randn(4, 3), torch.randn(3), torch.randn(4, 3)
        got = grad_fn(to_ms(x), to_ms(w), to_ms(u), to_ms(example[3]))
        leaves = [t.clone().requires_grad_() for t in (x, w, u)]
        y, v = gradient_paths(*leaves, example[3])
        (y.sum() + (v * v).sum()).backward()
        for name, g, leaf in zip("xwu", got, leaves, strict=True):
            want = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
            np.testing.assert_allclose(g.asnumpy(), want.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=name)
    assert parked() == 0
