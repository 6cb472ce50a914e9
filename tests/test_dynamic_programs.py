"""Whole models and functions captured with dynamic shapes (torch.export's dynamic_shapes): one
capture and one compiled graph for every size, against torch eager and autograd."""
from __future__ import annotations

import copy
import itertools

import mindspore as ms
import models
import numpy as np
import pytest
import torch
from loss_cell import LossCell, SumOf
from mindspore import Tensor, nn, ops
from test_module import assert_gradients_match
from torch.export import Dim

import ms_aten
from ms_aten import to_ms, to_torch

from common import set_mode

SHAPES = [(2, 8), (3, 5), (1, 13), (4, 2)]  # (batch, sequence)
TOKENS = {"input_ids": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=2, max=16)}}


def case(name: str) -> models.Case:
    torch.manual_seed(0)
    return {"gpt2": models.gpt2, "bert": models.bert}[name]()


@pytest.fixture
def exports(monkeypatch):
    """Counts torch.export calls: one capture per mode is the promise (the capture cache off:
    a Cell of the same model made by an earlier test would be read from it)."""
    monkeypatch.setenv("MS_ATEN_PROGRAM_CACHE", "off")
    calls: list[int] = []
    export = torch.export.export

    def counting(*args, **kwargs):
        calls.append(1)
        return export(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", counting)
    return calls


def compiles(primitive) -> list[int]:
    """Counts the Python inferences of a program's primitive: GRAPH mode runs one per compile
    (PYNATIVE one per call)."""
    calls: list[int] = []
    infer = primitive.__infer__

    def counting(*args):
        calls.append(1)
        return infer(*args)

    primitive.__infer__ = counting
    return calls


def targets_for(c: models.Case, batch: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, 100, (batch, seq + 1))
    if c.loss == "lm":
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    return tokens[:, :-1].contiguous(), torch.randint(0, 3, (batch,))


class GradientOf(nn.Cell):
    """The loss and the parameters' gradients, as a Cell (nn.TrainOneStepCell's way): one graph,
    whose dynamic sizes its set_inputs declares (ms.value_and_grad called directly compiles per
    input shape)."""

    def __init__(self, loss_cell: nn.Cell, params):
        super().__init__()
        self.loss_cell = loss_cell
        self.weights = ms.ParameterTuple(params)
        self.grad = ops.GradOperation(get_by_list=True)

    def construct(self, x, target):
        return self.loss_cell(x, target), self.grad(self.loss_cell, self.weights)(x, target)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_forward_and_gradients_match_torch_at_every_shape(name, mode, exports):
    c = case(name)
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(c.module), c.inputs, dynamic_shapes=TOKENS)
    assert cell.program.dynamic and len(exports) == 1
    gradient = GradientOf(LossCell(cell, c.loss), cell.trainable_params())
    gradient.set_inputs(Tensor(shape=[None, None], dtype=ms.int64),  # the user's own
                        Tensor(shape=[None, None] if c.loss == "lm" else [None], dtype=ms.int64))
    inferred = compiles(cell._function)
    for i, (batch, seq) in enumerate(SHAPES):
        tokens, target = targets_for(c, batch, seq)
        c.module.zero_grad()
        out = models.logits(c.module(tokens))
        loss = models.torch_loss(c.loss, out, target)
        loss.backward()
        np.testing.assert_allclose(models.logits(cell(to_ms(tokens))).asnumpy(),
                                   out.detach().numpy(),
                                   rtol=1e-4, atol=1e-5)
        value, grads = gradient(to_ms(tokens), to_ms(target))
        np.testing.assert_allclose(float(value), loss.item(), rtol=1e-4)
        assert_gradients_match(grads, cell, c.module)
        if i == 0:
            first = len(inferred)
    assert len(exports) == 1  # no capture for a new size
    if mode == "graph":  # both graphs (cell(x)'s and the gradient's) compiled once
        assert len(inferred) == first


def test_training_with_jit_dynamic_follows_torch_adam(exports):
    """A jitted step (ms.jit(dynamic=1)) with nn.Adam over batches of 6 sequence lengths: every
    step's loss within 1e-3 relative of torch.optim.Adam's on the same batches."""
    c, lr = case("gpt2"), 1e-3
    set_mode("graph")
    cell = ms_aten.module(copy.deepcopy(c.module), c.inputs, dynamic_shapes=TOKENS)
    optimizer = nn.Adam(cell.trainable_params(), learning_rate=lr)
    grad_fn = ms.value_and_grad(LossCell(cell, c.loss), None, optimizer.parameters)

    @ms.jit(dynamic=1)
    def step(x, target):
        loss, grads = grad_fn(x, target)
        optimizer(grads)
        return loss

    torch_optimizer = torch.optim.Adam(c.module.parameters(), lr=lr)
    ms_losses, torch_losses = [], []
    for seq in itertools.chain([8, 3, 12, 5, 16, 2], [8, 3, 12, 5, 16, 2]):
        tokens, target = targets_for(c, 2, seq)
        ms_losses.append(float(step(to_ms(tokens), to_ms(target))))
        torch_optimizer.zero_grad()
        loss = models.torch_loss(c.loss, models.logits(c.module(tokens)), target)
        loss.backward()
        torch_optimizer.step()
        torch_losses.append(loss.item())
    np.testing.assert_allclose(ms_losses, torch_losses, rtol=1e-3)
    assert len(exports) == 1


class PoolingCNN(torch.nn.Module):
    """Any batch and image size: strided convolution, BatchNorm, adaptive pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)
        self.pool = torch.nn.AdaptiveAvgPool2d(2)
        self.fc = torch.nn.Linear(24, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = torch.relu(self.bn(self.conv(x)))
        return self.fc(self.pool(features).flatten(1)), features


IMAGES = {"x": {0: Dim("n", min=1, max=8), 2: Dim("h", min=4, max=64),
                3: Dim("w", min=4, max=64)}}


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_cnn_with_dynamic_batch_and_image_size(mode, exports):
    torch.manual_seed(0)
    module = PoolingCNN().train()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (torch.randn(2, 3, 16, 12),),
                          dynamic_shapes=IMAGES)
    assert cell.program.mutations == ("bn.running_mean", "bn.running_var",
                                      "bn.num_batches_tracked")
    for n, h, w in [(2, 16, 12), (3, 9, 20), (1, 33, 7), (4, 4, 4)]:
        x = torch.randn(n, 3, h, w)
        logits, features = cell(to_ms(x))
        want_logits, want_features = module(x)
        assert features.shape == want_features.shape  # (h - 1)//2 + 1: FloorDiv in C++
        np.testing.assert_allclose(logits.asnumpy(), want_logits.detach().numpy(),
                                   rtol=1e-4, atol=1e-5)
    buffers = {p.name: to_torch(p.value()) for p in cell.weights}
    torch.testing.assert_close(buffers["bn.running_mean"], module.bn.running_mean)
    torch.testing.assert_close(buffers["bn.running_var"], module.bn.running_var)
    assert int(buffers["bn.num_batches_tracked"]) == 4
    assert len(exports) == 1


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_a_size_outside_its_range_is_an_error_and_the_next_call_works(mode):
    c = case("gpt2")
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(c.module), c.inputs, dynamic_shapes=TOKENS)
    too_long = torch.randint(0, 100, (2, 17))
    with pytest.raises((ValueError, RuntimeError),
                       match=r"input 0 \('input_ids'\) dim 1 \(seq\) is 17, outside its range "
                             r"\[2, 16\]"):
        models.logits(cell(to_ms(too_long))).asnumpy()
    tokens = torch.randint(0, 100, (3, 6))
    for _ in range(2):  # the second call's sizes are checked from remembered shapes
        np.testing.assert_allclose(models.logits(cell(to_ms(tokens))).asnumpy(),
                                   models.logits(c.module(tokens)).detach().numpy(),
                                   rtol=1e-4, atol=1e-5)
    with pytest.raises((ValueError, RuntimeError), match=r"is 17, outside its range"):
        models.logits(cell(to_ms(too_long))).asnumpy()


def test_remembered_output_shapes_are_the_library_s_and_the_caller_s_own():
    c = case("gpt2")
    cell = ms_aten.module(copy.deepcopy(c.module), c.inputs, dynamic_shapes=TOKENS)
    shapes = [*(list(p.shape) for p in cell.weights), [3, 6]]
    first = cell.primitive.output_shapes(shapes)
    assert first[0] == [3, 6, 100]  # the logits
    first[0][0] = -7  # a caller's change stays the caller's
    assert cell.primitive.output_shapes(shapes) == cell.primitive.output_shapes(
        [*shapes[:-1], [3, 6]])
    assert cell.primitive.output_shapes(shapes)[0] == [3, 6, 100]


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_a_static_size_or_dtype_that_differs_is_an_error(mode):
    fn = ms_aten.function(lambda x: torch.tanh(x) * 2, (torch.randn(3, 4),),
                          dynamic_shapes=({0: Dim("rows")},))
    set_mode(mode)
    with pytest.raises((ValueError, RuntimeError), match=r"input 0 is float32\[3, 5\], where "
                                                         r"the program takes float32\[\?, 4\]"):
        ms_aten.testing.run(fn, (to_ms(torch.randn(3, 5)),), mode).asnumpy()
    # A call from Python is refused before MindSpore's (a TypeError, cell.py), one inside a
    # graph by shape inference.
    with pytest.raises((TypeError, ValueError, RuntimeError),
                       match=r"float64\[3, 4\], where the program takes float32\[\?, 4\]"):
        ms_aten.testing.run(fn, (to_ms(torch.randn(3, 4, dtype=torch.float64)),),
                            mode).asnumpy()
    x = torch.randn(7, 4)
    torch.testing.assert_close(to_torch(ms_aten.testing.run(fn, (to_ms(x),), mode)),
                               torch.tanh(x) * 2)


def test_a_function_takes_dynamic_shapes_by_argument_name_and_derived_dims():
    """dynamic_shapes as torch.export takes it for a function: by argument name, with a
    derived dim (2 * n), whose symbol the program solves for from the size."""
    n = Dim("n", min=1, max=32)
    fn = ms_aten.function(lambda a, b: torch.cat([a, a]) + b,
                          (torch.randn(3, 2), torch.randn(6, 2)),
                          dynamic_shapes={"a": {0: n}, "b": {0: 2 * n}})
    for mode in ("pynative", "graph"):
        set_mode(mode)
        a, b = torch.randn(5, 2), torch.randn(10, 2)
        got = ms_aten.testing.run(fn, (to_ms(a), to_ms(b)), mode)
        torch.testing.assert_close(to_torch(got), torch.cat([a, a]) + b)
        with pytest.raises((ValueError, RuntimeError),
                           match=r"input 1 \('b'\) dim 0 \(2\*n\) is 9, but must equal 10"):
            ms_aten.testing.run(fn, (to_ms(a), to_ms(torch.randn(9, 2))), mode).asnumpy()


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_dropout_replays_its_mask_at_every_size(mode):
    """A random program (dropout in train mode) with dynamic shapes: its backward replays the
    forward's draws, so the gradients are torch's for the same seed."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Dropout(0.5)).train()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (torch.randn(4, 6),),
                          dynamic_shapes=({0: Dim("n", max=32)},))
    grad_fn = ms.value_and_grad(SumOf(cell), None, cell.trainable_params())
    for rows in (4, 9, 2):
        x = torch.randn(rows, 6)
        torch.manual_seed(rows)
        value, grads = grad_fn(to_ms(x))
        float(value)
        torch.manual_seed(rows)
        module.zero_grad()
        module(x).sum().backward()
        np.testing.assert_allclose(grads[0].asnumpy(), module[0].weight.grad.numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_second_order_in_graph_mode_at_every_size():
    fn = ms_aten.function(lambda x: torch.tanh(x) * x, (torch.randn(3),),
                          dynamic_shapes=({0: Dim("n")},))
    set_mode("graph")
    second = ms.grad(SumOf(ms.grad(SumOf(fn))))
    for size in (3, 7, 2):
        xt = torch.randn(size, requires_grad=True)
        first = torch.autograd.grad((torch.tanh(xt) * xt).sum(), xt, create_graph=True)[0]
        expected = torch.autograd.grad(first.sum(), xt)[0]
        np.testing.assert_allclose(second(to_ms(xt.detach())).asnumpy(), expected.numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_values_computed_from_tensor_values_run_inside_a_program():
    """nonzero and .item() inside the graph: the program runs them eagerly, so an output whose
    shape does not depend on them works; one whose shape does is a CaptureError naming it."""
    def masked_mean(x):
        picked = x[x > 0]
        return picked.sum() / picked.numel(), x * 2

    fn = ms_aten.function(masked_mean, (torch.randn(5, 3),), dynamic_shapes=({0: Dim("n")},))
    for mode in ("pynative", "graph"):
        x = torch.randn(6, 3)
        got = ms_aten.testing.run(fn, (to_ms(x),), mode)
        torch.testing.assert_close(to_torch(got[0]), x[x > 0].mean())
    with pytest.raises(ms_aten.CaptureError, match=r"node 'index' .*depends on tensor values"):
        ms_aten.function(lambda x: x[x > 0], (torch.randn(5, 3),),
                         dynamic_shapes=({0: Dim("n")},))


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_a_numpy_array_or_another_rank_is_a_type_error_naming_the_input(mode):
    # GRAPH mode said "should be mutable one, but got static!" or failed in the kernel
    # ("dim 1 out of range for rank 1") where PYNATIVE named the input.
    fn = ms_aten.function(lambda rows: torch.tanh(rows) * 2, (torch.randn(3, 4),),
                          dynamic_shapes=({0: Dim("n")},))
    set_mode(mode)
    x = torch.randn(5, 4)
    with pytest.raises(TypeError, match=r"input 'rows' is a numpy.ndarray, where the program "
                                        r"takes a MindSpore Tensor float32\[\?, 4\]"):
        fn(x.numpy())
    with pytest.raises(TypeError, match=r"input 'rows' is float32\[20\], where the program "
                                        r"takes float32\[\?, 4\]"):
        fn(to_ms(x.reshape(-1)))
    torch.testing.assert_close(to_torch(fn(to_ms(x))), torch.tanh(x) * 2)


def test_a_wrong_input_count_names_the_modules_inputs():
    c = case("gpt2")
    cell = ms_aten.module(copy.deepcopy(c.module), c.inputs, dynamic_shapes=TOKENS)
    for mode in ("pynative", "graph"):
        set_mode(mode)
        with pytest.raises(TypeError, match=r"'GPT2LMHeadModel' got 2 inputs by position, where "
                                            r"it was captured with 1: input_ids$"):
            cell(to_ms(c.inputs[0]), to_ms(c.inputs[0])).asnumpy()
