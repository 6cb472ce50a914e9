"""torch functions as one MindSpore primitive (ms_aten.function), against torch eager/autograd."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from loss_cell import SumOf
from mindspore import nn
from torch.export import Dim

import ms_aten
from ms_aten.programs.base import Signature

from common import (
    MODES,
    BridgeKernel,
    OpCell,
    assert_same,
    record_calls,
    run,
    set_mode,
    to_ms,
    to_torch,
)


def quantize(x: torch.Tensor) -> torch.Tensor:
    """The Torch-AIE custom-pass tutorial's quantize subgraph, fused into one kernel."""
    return torch.clamp(torch.round(x * 12.5 + 3.0), -128, 127)


def block(x, w, b, gamma):
    h = F.gelu(F.linear(x, w, b))
    h = F.layer_norm(h, [h.shape[-1]], gamma)
    return h.softmax(-1), h.amax(-1)


def gather_rows(table, index):
    return torch.index_select(table, 0, index).sum(0) * 2


class GradCell(nn.Cell):
    """sum of (output_i * weights_i) over a function's outputs: one scalar to differentiate."""

    def __init__(self, fn, n_out: int, returns_tuple: bool | None = None):
        super().__init__()
        self.fn = fn
        self.n_out = n_out
        self.returns_tuple = n_out > 1 if returns_tuple is None else returns_tuple

    def construct(self, *args):
        out = self.fn(*args)
        if not self.returns_tuple:
            return (out * out).sum()
        total = (out[0] * out[0]).sum()
        for i in range(1, self.n_out):
            total = total + (out[i] * out[i]).sum()
        return total


def torch_grads(fn, inputs, n_out):
    leaves = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    sum((o * o).sum() for o in outs[:n_out]).backward()
    return [x.grad if x.grad is not None else torch.zeros_like(x) for x in leaves]


CASES = {
    "quantize": (quantize, lambda: (torch.randn(4, 16) * 8,), 1),
    "block": (block, lambda: (torch.randn(3, 5, 16), torch.randn(8, 16), torch.randn(8),
                              torch.randn(8)), 2),
    "float64": (lambda x, y: torch.sin(x) * y.exp(), lambda: (torch.randn(3, 4).double(),
                                                               torch.randn(4).double()), 1),
    "int_index": (gather_rows, lambda: (torch.randn(6, 5), torch.tensor([0, 3, 3, 5])), 1),
    "zero_dim": (lambda x, y: x * y + x, lambda: (torch.tensor(2.5), torch.randn(3)), 1),
    "zero_size": (lambda x: (x * 2).sum(0), lambda: (torch.randn(0, 4),), 1),
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", list(CASES))
def test_function_forward_and_gradients_match_torch(name, mode):
    fn, make, n_out = CASES[name]
    torch.manual_seed(0)
    inputs = make()
    op = ms_aten.function(fn, inputs)
    assert isinstance(op, ms_aten.TorchFunction) and isinstance(op.primitive, ms.ops.Custom)
    expected = fn(*inputs)
    assert_same(run(op, to_ms(inputs), mode), expected)
    set_mode(mode)
    positions = tuple(range(len(inputs)))
    grads = ms.grad(GradCell(op, n_out), grad_position=positions)(*to_ms(inputs))
    grads = grads if isinstance(grads, tuple) else (grads,)
    for got, want in zip(grads, torch_grads(fn, inputs, n_out), strict=True):
        np.testing.assert_allclose(to_torch(got).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", list(MODES))
def test_quantize_is_one_launch(mode):
    x = torch.randn(64, 64) * 8
    op = ms_aten.function(quantize, (x,))
    assert op.program.n_nodes == 4  # mul, add, round, clamp
    run(op, to_ms((x,)), mode).asnumpy()
    before = ms_aten.launch_count()
    assert_same(run(op, to_ms((x,)), mode), quantize(x))
    assert ms_aten.launch_count() - before == 1


def test_a_graph_mode_call_from_python_takes_the_fast_path(monkeypatch):
    """GRAPH mode, a function called from Python outside any graph: one launch through the fast
    path, a structured (tuple) result as torch's, and no graph compiled; as the cell of an outer
    Cell, MindSpore compiles it with the AOT kernel."""
    from ms_aten.programs.runtime import fast_path

    taken = record_calls(monkeypatch, fast_path, "call")
    set_mode("graph")
    args = (torch.randn(3, 4), torch.randn(5, 4), torch.randn(5), torch.randn(5))
    fn = ms_aten.function(block, args)
    want = block(*args)
    got = fn(*to_ms(args))
    assert isinstance(got, tuple) and len(taken) == 1 and not fn._compiled
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(to_torch(g).numpy(), w.numpy(), rtol=1e-5, atol=1e-5)
    outer = OpCell(fn)
    for g, w in zip(outer(*to_ms(args)), want, strict=True):
        np.testing.assert_allclose(to_torch(g).numpy(), w.numpy(), rtol=1e-5, atol=1e-5)
    assert len(taken) == 1


@pytest.mark.parametrize("record", [True, False], ids=["kept_graph", "recompute"])
@pytest.mark.parametrize("mode", list(MODES))
def test_random_function_draws_from_torch_and_its_backward_sees_the_mask(mode, record):
    """Dropout draws from torch's CPU generator; the backward uses the forward's mask, from the
    autograd graph the forward kept or, recomputing, by replaying the RNG state the primitive
    outputs beside the graph's outputs (which the Cell does not return)."""
    def noisy(x, w):
        return F.dropout(x * w, 0.5, True)

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    op = ms_aten.function(noisy, (x, w))
    primitive = ms_aten.AtenFunction(op.program, record=record)
    set_mode(mode)
    torch.manual_seed(3)
    out, state, _ = OpCell(primitive)(*to_ms((x, w)))
    out = out.asnumpy()  # MindSpore runs asynchronously: finish before reseeding torch
    torch.manual_seed(3)
    assert torch.equal(to_torch(state), torch.get_rng_state())
    np.testing.assert_allclose(out, noisy(x, w).numpy(), rtol=1e-6)
    torch.manual_seed(3)
    np.testing.assert_allclose(op(*to_ms((x, w))).asnumpy(), out, rtol=1e-6)  # the Cell: outputs
    torch.manual_seed(3)  # the same mask again; the backward must see it
    grad = ms.grad(GradCell(ms_aten.TorchFunction(primitive), 1), grad_position=1)(
        *to_ms((x, w)))
    # out = mask * x * w / 0.5, so d/dw sum(out^2) = 2 out * mask x / 0.5 = 4 out x
    np.testing.assert_allclose(grad.asnumpy(), 4 * out * x.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_other_shapes_are_captured_again_in_both_modes(mode):
    op = ms_aten.function(lambda x: x.cumsum(0) * x, (torch.randn(4, 3),))
    for x in (torch.randn(7, 2), torch.randn(4, 3), torch.randn(7, 2)):
        assert_same(run(op, to_ms((x,)), mode), x.cumsum(0) * x)
        set_mode(mode)
        grad = ms.grad(GradCell(op, 1))(*to_ms((x,)))  # of sum(out * out)
        leaf = x.clone().requires_grad_()
        out = leaf.cumsum(0) * leaf
        expected = torch.autograd.grad((out * out).sum(), leaf)[0]
        np.testing.assert_allclose(grad.asnumpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_torch_library_op_inside_a_function():
    lib = torch.library.Library("ms_aten_fn_test", "DEF")  # noqa: F841  (kept alive)
    lib.define("scale_shift(Tensor x, float s) -> Tensor")
    lib.impl("scale_shift", lambda x, s: x * s + 1, "CPU")
    lib.impl("scale_shift", lambda x, s: torch.empty_like(x), "Meta")

    def fn(x):
        return torch.ops.ms_aten_fn_test.scale_shift(x, 3.0).relu()

    x = torch.randn(5)
    assert_same(run(ms_aten.function(fn, (x,)), to_ms((x,)), "graph"), fn(x))


def test_function_errors():
    with pytest.raises(TypeError, match="args must be a tuple"):
        ms_aten.function(torch.relu, [torch.randn(2)])
    with pytest.raises(ms_aten.CaptureError, match="torch.export cannot capture"):
        ms_aten.function(lambda x: x * 2 if x.sum() > 0 else x, (torch.randn(3),),
                         strict=False)  # else it runs as an opaque torch call (test_opaque.py)
    op = ms_aten.function(torch.relu, (torch.randn(2),))
    with pytest.raises(TypeError, match=r"got 2 inputs by position, where it was captured "
                                        r"with 1: input0"):
        run(op, to_ms((torch.randn(2), torch.randn(2))), "graph")


@pytest.mark.parametrize("mode", list(MODES))
def test_second_order_through_a_program_matches_torch(mode):
    """ms.grad of ms.grad: the program's backward has a backward of its own (one launch; in
    PYNATIVE the fast path records the backward itself); a third order is an error naming the
    program, and the lower orders still work."""
    op = ms_aten.function(lambda x: torch.tanh(x) * x, (torch.randn(3),))
    x = to_ms((torch.randn(3),))[0]
    set_mode(mode)
    second = ms.grad(SumOf(ms.grad(SumOf(op))))(x)
    xt = to_torch(x).requires_grad_()
    first = torch.autograd.grad((torch.tanh(xt) * xt).sum(), xt, create_graph=True)[0]
    expected = torch.autograd.grad(first.sum(), xt)[0]
    np.testing.assert_allclose(second.asnumpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match=r"<lambda> \(second-order backward\): gradients "
                                           r"of order 3 through a whole program"):
        ms.grad(SumOf(ms.grad(SumOf(ms.grad(SumOf(op))))))(x).asnumpy()
    np.testing.assert_allclose(ms.grad(SumOf(op))(x).asnumpy(), first.detach().numpy(),
                               rtol=1e-5)


def _index_out_of_range(x):
    return ms_aten.op("index_select", dim=0)(x, ms.Tensor([7])).sum()


def _size_out_of_range(x):
    function = ms_aten.function(torch.sin, (torch.randn(3),),
                                dynamic_shapes=({0: Dim("n", min=2, max=4)},))
    return function(ms.ops.concat([x, x, x])).sum()


@pytest.mark.parametrize("failing", [_index_out_of_range, _size_out_of_range])
def test_an_error_inside_pynative_grad_leaves_later_gradients_intact(failing):
    """An exception from a fast-path call inside ms.grad clears MindSpore's PYNATIVE recording,
    as MindSpore's own ops do when they fail; left open, it made the next GRAPH-mode ms.grad
    differentiate one order too high (here: a third order, refused)."""
    x = to_ms((torch.randn(3),))[0]
    set_mode("pynative")
    with pytest.raises((RuntimeError, ValueError), match=r"out of range|outside"):
        ms.grad(failing)(x).asnumpy()
    op = ms_aten.function(lambda x: torch.tanh(x) * x, (torch.randn(3),))
    set_mode("graph")
    second = ms.grad(SumOf(ms.grad(SumOf(op))))(x)
    xt = to_torch(x).requires_grad_()
    first = torch.autograd.grad((torch.tanh(xt) * xt).sum(), xt, create_graph=True)[0]
    expected = torch.autograd.grad(first.sum(), xt)[0]
    np.testing.assert_allclose(second.asnumpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_second_order_off_the_fast_path_in_pynative_is_a_clear_error(monkeypatch):
    """PYNATIVE's Custom route (no fast-path module): MindSpore's tape would not lead from the
    backward back to the inputs it read, so a second order is refused by name."""
    from ms_aten.native import pyboost

    monkeypatch.setattr(pyboost, "available", lambda: False)
    op = ms_aten.function(lambda x: torch.tanh(x) * x, (torch.randn(3),))
    x = to_ms((torch.randn(3),))[0]
    set_mode("pynative")
    with pytest.raises(RuntimeError, match=r"<lambda> \(backward\): a gradient of a gradient "
                                           r"through a whole program needs GRAPH mode"):
        ms.grad(SumOf(ms.grad(SumOf(op))))(x).asnumpy()
    xt = to_torch(x).requires_grad_()
    (torch.tanh(xt) * xt).sum().backward()
    np.testing.assert_allclose(ms.grad(SumOf(op))(x).asnumpy(), xt.grad.numpy(), rtol=1e-5)


def test_one_kernel_runs_the_capture_registered_for_its_inputs():
    """The library side of recapture (csrc/program/family.h), through the C API: one kernel
    runs each signature's program, switching back and forth, and inputs nobody captured are
    an error naming them, not a crash."""
    primitive = ms_aten.function(lambda x: x * 2 + 1, (torch.zeros(2, 3),)).primitive
    primitive.program_for(Signature(((4,),), (torch.float32,)))  # as a call with a [4] input
    with BridgeKernel(primitive.attrs["ms_aten_spec"]) as kernel:
        for shape in ((2, 3), (4,), (2, 3)):
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            out, handle = np.zeros_like(x), np.zeros(1, np.int64)
            assert kernel.launch([x, out, handle]) == ""
            np.testing.assert_allclose(out, x * 2 + 1, rtol=1e-6)
        x = np.zeros(5, np.float32)
        assert "no program was captured for inputs (float32[5])" in kernel.launch(
            [x, x.copy(), handle])
