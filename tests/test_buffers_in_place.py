"""Buffers a program updates are written in place, into their Parameters: a static KV cache
(index_copy_ along a position input, as transformers' StaticCache does) and BatchNorm's running
statistics, against torch eager, in both modes."""
from __future__ import annotations

import copy

import mindspore as ms
import models
import numpy as np
import pytest
import torch
from loss_cell import SumOf
from mindspore import nn
from torch.export import Dim
from training import train_ms, train_torch

import ms_aten
from ms_aten import to_ms

from common import set_mode

HEADS, HEAD_DIM, WIDTH, CACHE = 2, 4, 8, 16


class CachedAttention(torch.nn.Module):
    """One attention layer over a static cache [batch, heads, positions, head_dim]: the new keys
    and values go in at `cache_position` (index_copy_, or an indexed assignment, index_put_:
    StaticCache's two ways), then the queries attend over the whole cache, masked to the
    positions written so far."""

    def __init__(self, update: str = "index_copy") -> None:
        super().__init__()
        self.update = update
        self.q, self.k, self.v = (torch.nn.Linear(WIDTH, HEADS * HEAD_DIM) for _ in range(3))
        self.register_buffer("k_cache", torch.zeros(1, HEADS, CACHE, HEAD_DIM))
        self.register_buffer("v_cache", torch.zeros(1, HEADS, CACHE, HEAD_DIM))

    def forward(self, x: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        if self.update == "index_copy":
            self.k_cache.index_copy_(2, cache_position, k)
            self.v_cache.index_copy_(2, cache_position, v)
        else:
            self.k_cache[:, :, cache_position] = k
            self.v_cache[:, :, cache_position] = v
        mask = torch.arange(CACHE)[None, :] <= cache_position[:, None]
        out = torch.nn.functional.scaled_dot_product_attention(q, self.k_cache, self.v_cache,
                                                               attn_mask=mask)
        return out.transpose(1, 2).reshape(batch, seq, -1)


SEQ = Dim("seq", min=1, max=CACHE)


def cached_attention(update: str = "index_copy") -> tuple[CachedAttention, ms_aten.TorchModule]:
    """A torch module and its cell (the cell's own copy), the sequence length dynamic."""
    torch.manual_seed(0)
    module = CachedAttention(update)
    cell = ms_aten.module(copy.deepcopy(module), (torch.randn(1, 5, WIDTH), torch.arange(5)),
                          dynamic_shapes=({1: SEQ}, {0: SEQ}))
    return module, cell


def parameter(cell: ms_aten.TorchModule, name: str) -> ms.Parameter:
    # A Cell held by another is renamed with its attribute path ("cell.k_cache").
    return next(p for p in cell.weights if p.name == name or p.name.endswith("." + name))


def node_lines(spec: str) -> list[str]:
    return [line for line in spec.splitlines() if line.startswith("n ")]


@pytest.mark.parametrize("update", ["index_copy", "index_put"])
def test_the_cache_update_runs_in_place_on_the_buffer(update):
    _, cell = cached_attention(update)
    program = cell.program
    assert program.mutations == program.reinplaced == ("k_cache", "v_cache")
    assert program.n_outputs == 1  # the attention output alone: the caches are not outputs
    written = [cell._weight_names.index(b) for b in ("k_cache", "v_cache")]
    assert program.written == tuple(written)
    forward = node_lines(program.spec)
    # index_copy_ / index_put_ writes each buffer (u<input>); nothing copies a whole cache.
    for buffer in written:
        assert sum(f" u{buffer} " in line and f"aten::{update}_ " in line
                   for line in forward) == 1
    assert not any("aten::copy_ " in line for line in forward)
    assert not any(line.startswith("c ") for line in program.spec.splitlines())
    # The VJP runs the functional graph, which writes nothing.
    assert not any(" u" in line for line in node_lines(program.vjp_spec))


@pytest.mark.parametrize("update", ["index_copy", "index_put"])
@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_kv_cache_decoding_matches_torch_and_writes_the_parameters(mode, update):
    """A 5-token prefill, then 1-token steps, in one dynamic program: outputs and caches equal
    torch eager's after every call, in the Parameters' own memory."""
    module, cell = cached_attention(update)
    set_mode(mode)
    k_cache, v_cache = parameter(cell, "k_cache"), parameter(cell, "v_cache")
    pointers = k_cache.data_ptr(), v_cache.data_ptr()
    position = 0
    for seq in [5, 1, 1, 1]:
        x, positions = torch.randn(1, seq, WIDTH), torch.arange(position, position + seq)
        with torch.no_grad():
            want = module(x, positions)
        got = cell(to_ms(x), to_ms(positions))
        np.testing.assert_allclose(got.asnumpy(), want.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(k_cache.asnumpy(), module.k_cache.numpy())
        np.testing.assert_array_equal(v_cache.asnumpy(), module.v_cache.numpy())
        # A MindSpore op reading the Parameter after the call sees the new cache.
        np.testing.assert_array_equal((v_cache * 2).asnumpy(), 2 * module.v_cache.numpy())
        position += seq
    assert (k_cache.data_ptr(), v_cache.data_ptr()) == pointers
    assert np.abs(k_cache.asnumpy()[:, :, position:]).max() == 0  # nothing past the last token


class SummedDecode(nn.Cell):
    def __init__(self, cell: ms_aten.TorchModule) -> None:
        super().__init__()
        self.cell = cell

    def construct(self, x, positions):
        return self.cell(x, positions).sum()


class ReadAround(nn.Cell):
    """Reads the cache before and after the cell's call, inside one graph."""

    def __init__(self, cell: ms_aten.TorchModule) -> None:
        super().__init__()
        self.cell = cell
        self.cache = parameter(cell, "k_cache")

    def construct(self, x, positions):
        before = self.cache * 1
        out = self.cell(x, positions)
        return out, before, self.cache * 1


def test_a_read_after_the_call_in_the_same_graph_sees_the_new_values():
    module, cell = cached_attention()
    set_mode("graph")
    net = ReadAround(cell)
    old = np.zeros_like(module.k_cache.numpy())
    position = 0
    for seq in [5, 1]:
        x, positions = torch.randn(1, seq, WIDTH), torch.arange(position, position + seq)
        with torch.no_grad():
            want = module(x, positions)
        out, before, after = net(to_ms(x), to_ms(positions))
        np.testing.assert_allclose(out.asnumpy(), want.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(before.asnumpy(), old)
        np.testing.assert_array_equal(after.asnumpy(), module.k_cache.numpy())
        old = module.k_cache.numpy().copy()
        position += seq


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_gradients_through_a_cache_update_match_torch(mode):
    """The backward reads the cache the forward wrote (GRAPH mode's first step recomputes the
    forward on it, which the index_copy_ makes exact); the cache is written once per step."""
    module, cell = cached_attention()
    set_mode(mode)
    loss_fn = ms.value_and_grad(SummedDecode(cell), None, cell.trainable_params())
    if mode == "graph":
        loss_fn = ms.jit(loss_fn)
    position = 0
    for seq in [3, 2]:
        x, positions = torch.randn(1, seq, WIDTH), torch.arange(position, position + seq)
        module.zero_grad()
        module(x, positions).sum().backward()
        for buffer in (module.k_cache, module.v_cache):
            buffer.detach_()  # the next call's index_copy_ starts a new graph, as the cell's does
        _, grads = loss_fn(to_ms(x), to_ms(positions))
        for grad, (name, p) in zip(grads, module.named_parameters(), strict=True):
            np.testing.assert_allclose(grad.asnumpy(), p.grad.numpy(), rtol=1e-4, atol=1e-5,
                                       err_msg=name)
        np.testing.assert_array_equal(parameter(cell, "k_cache").asnumpy(),
                                      module.k_cache.numpy())
        position += seq


class ScaledByBuffer(torch.nn.Module):
    """An output that reads a buffer's old value, then an update of that buffer (not an
    overwrite): a recompute on the new value would give another gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x + self.scale)  # the weight's gradient reads x + the old scale
        self.scale.mul_(3.0)
        return out


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_a_buffer_read_before_its_update_gives_torchs_gradients(mode):
    """The update is copied into the buffer after the program; the backward (the graph the
    forward kept, from the first launch on) sees the value the forward read."""
    torch.manual_seed(0)
    module = ScaledByBuffer()
    cell = ms_aten.module(copy.deepcopy(module), (torch.randn(2, 3),))
    assert cell.program.mutations == ("scale",) and cell.program.reinplaced == ()
    assert any(line.startswith("w 0 ") for line in cell.program.spec.splitlines())
    set_mode(mode)
    grad_fn = ms.value_and_grad(SumOf(cell), None, cell.trainable_params())
    if mode == "graph":
        grad_fn = ms.jit(grad_fn)
    for _ in range(3):
        x = torch.randn(2, 3)
        module.zero_grad()
        module(x).sum().backward()
        _, grads = grad_fn(to_ms(x))
        for grad, (name, p) in zip(grads, module.named_parameters(), strict=True):
            np.testing.assert_allclose(grad.asnumpy(), p.grad.numpy(), rtol=1e-5, err_msg=name)
        np.testing.assert_array_equal(parameter(cell, "scale").asnumpy(), module.scale.numpy())


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_batchnorm_running_statistics_follow_torch_through_training(mode):
    case = models.cnn(train=True)
    cell = ms_aten.module(copy.deepcopy(case.module), case.inputs)
    program = cell.program
    # num_batches_tracked += 1 runs as add_ on the buffer; the statistics, which one node
    # computes beside BatchNorm's output, are copied in after the program (c lines).
    assert set(program.reinplaced) == {"bn.num_batches_tracked", "bn2.num_batches_tracked"}
    assert sum(line.startswith("c ") for line in program.spec.splitlines()) == 4
    steps = 3
    _, cell, _ = train_ms(case, mode, lambda params: nn.SGD(params, 0.1), steps)
    _, module, _ = train_torch(case, lambda params: torch.optim.SGD(params, 0.1), steps)
    buffers = cell.torch_state_dict()
    for name, want in module.named_buffers():
        torch.testing.assert_close(buffers[name], want, rtol=1e-5, atol=1e-6, msg=name)
    assert int(buffers["bn.num_batches_tracked"]) == steps
    for name, want in module.named_parameters():
        torch.testing.assert_close(buffers[name], want.detach(), rtol=1e-4, atol=1e-5, msg=name)


class ReadThenDecode(nn.Cell):
    """A MindSpore op that reads the cache (and saves it for its backward), then the cell's
    call that writes it."""

    def __init__(self, cell: ms_aten.TorchModule) -> None:
        super().__init__()
        self.cell = cell
        self.cache = parameter(cell, "k_cache")
        self.w = ms.Parameter(ms.Tensor(np.ones(self.cache.shape, np.float32)), name="w")

    def construct(self, x, positions):
        return (self.w * self.cache).sum() + self.cell(x, positions).sum()


def test_graph_mode_differentiates_a_read_before_the_write_with_the_old_values():
    _, cell = cached_attention()
    set_mode("graph")
    net = ReadThenDecode(cell)
    grad_fn = ms.jit(ms.grad(net, None, [net.w]))
    position = 0
    for seq in [3, 1]:
        old = net.cache.asnumpy().copy()
        (grad,) = grad_fn(to_ms(torch.randn(1, seq, WIDTH)),
                          to_ms(torch.arange(position, position + seq)))
        np.testing.assert_array_equal(grad.asnumpy(), old)  # d/dw sum(w * cache) = old cache
        assert not np.array_equal(net.cache.asnumpy(), old)
        position += seq


def test_pynative_refuses_a_backward_that_saved_the_buffer_before_the_write():
    """The fast path bumps the written Parameters' versions, as MindSpore's in-place ops do:
    MindSpore's backward of the read then fails its version check instead of reading the new
    cache."""
    _, cell = cached_attention()
    set_mode("pynative")
    net = ReadThenDecode(cell)
    grad_fn = ms.grad(net, None, [net.w])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        grad_fn(to_ms(torch.randn(1, 3, WIDTH)), to_ms(torch.arange(3)))
    # Later calls work.
    out = cell(to_ms(torch.randn(1, 1, WIDTH)), to_ms(torch.arange(3, 4)))
    assert out.shape == (1, 1, WIDTH)


class SliceWrite(torch.nn.Module):
    """A slice assignment (slice_scatter in the exported graph), then a read of the buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.zeros(4, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.buf[:, 2:4] = x
        return self.buf.sum(0)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_a_slice_assignment_copies_into_the_slice_of_the_buffer(mode):
    module = SliceWrite()
    cell = ms_aten.module(copy.deepcopy(module), (torch.randn(4, 2),))
    spec = cell.program.spec.splitlines()
    assert cell.program.reinplaced == ("buf",)
    assert sum(line.startswith("n _ ") and "aten::copy_ . 1 u" in line for line in spec) == 1
    assert not any(line.startswith("c ") for line in spec)
    set_mode(mode)
    for _ in range(2):
        x = torch.randn(4, 2)
        np.testing.assert_allclose(cell(to_ms(x)).asnumpy(), module(x).numpy(), rtol=1e-6)
        np.testing.assert_array_equal(parameter(cell, "buf").asnumpy(), module.buf.numpy())
