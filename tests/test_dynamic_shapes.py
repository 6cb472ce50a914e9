"""Unknown sizes: a Cell whose set_inputs carries None dims compiles once in GRAPH mode and runs
many shapes, forward and backward; the library's C++ shape hook infers every launch."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mindspore import Parameter, Tensor, nn

import ms_aten
from ms_aten import ShapeInferenceError
from ms_aten.ops.primitive import CppInferred

from common import assert_same, run, set_mode, to_ms

IN, OUT = 16, 8
BATCHES = [(2, 3), (4, 5), (1, 7)]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


class Block(nn.Cell):
    """linear -> gelu -> layer_norm -> softmax, the weights as Parameters."""

    def __init__(self, weights: dict[str, torch.Tensor]):
        super().__init__()
        self.linear = ms_aten.op("linear")
        self.gelu = ms_aten.op("gelu")
        self.norm = ms_aten.op("layer_norm", normalized_shape=[OUT])
        self.softmax = ms_aten.op("softmax", dim=-1)
        self.w = Parameter(to_ms(weights["w"]), name="w")
        self.b = Parameter(to_ms(weights["b"]), name="b")
        self.ln_w = Parameter(to_ms(weights["ln_w"]), name="ln_w")
        self.ln_b = Parameter(to_ms(weights["ln_b"]), name="ln_b")

    def construct(self, x):
        y = self.gelu(self.linear(x, self.w, self.b))
        return self.softmax(self.norm(y, self.ln_w, self.ln_b))


def torch_block(x: torch.Tensor, weights: dict[str, torch.Tensor]) -> torch.Tensor:
    y = F.gelu(F.linear(x, weights["w"], weights["b"]))
    return F.softmax(F.layer_norm(y, [OUT], weights["ln_w"], weights["ln_b"]), dim=-1)


class Loss(nn.Cell):
    """sum(net(*x) ** 2): softmax rows sum to one, so a plain sum would have zero gradients."""

    def __init__(self, net: nn.Cell):
        super().__init__()
        self.net = net

    def construct(self, *xs):
        y = self.net(*xs)
        return (y * y).sum()


class Grad(nn.Cell):
    """ms.grad inside a Cell: gradients for the inputs (and the weights, if any)."""

    def __init__(self, loss: nn.Cell, positions, weights=None):
        super().__init__()
        self.grad = ms.grad(loss, grad_position=positions, weights=weights)

    def construct(self, *xs):
        return self.grad(*xs)


@pytest.fixture
def checks(monkeypatch) -> list:
    """The input shapes of every C++-inferred call MindSpore compiles (GRAPH mode calls
    __check__ right before each compile-time inference; a run-time one never does)."""
    seen = []
    original = CppInferred.__check__

    def record(self, *args):
        seen.append([a["shape"] for a in args])
        return original(self, *args)

    monkeypatch.setattr(CppInferred, "__check__", record)
    return seen


def weights() -> dict[str, torch.Tensor]:
    return {"w": randn(OUT, IN), "b": randn(OUT), "ln_w": randn(OUT) + 1, "ln_b": randn(OUT)}


def has_unknown(shape) -> bool:
    """Whether a shape (or a tuple input's shapes) has an unknown size."""
    if shape and isinstance(shape[0], (list, tuple)):
        return any(map(has_unknown, shape))
    return -1 in shape


def assert_compiled_once(mode: str, checks: list, after_first: int) -> None:
    """GRAPH mode compiled every ms_aten op once, for unknown sizes, before the first run."""
    if mode == "graph":
        assert after_first > 0 and len(checks) == after_first, "a new shape recompiled the graph"
        assert all(has_unknown(call[0]) for call in checks), checks


def test_block_compiles_once_and_runs_many_shapes(mode, checks):
    set_mode(mode)
    params = weights()
    net = Block(params)
    net.set_inputs(Tensor(shape=[None, None, IN], dtype=ms.float32))
    after_first = 0
    for i, batch in enumerate(BATCHES):
        x = randn(*batch, IN)
        assert_same(net(to_ms(x)), torch_block(x, params), **TOLERANCE)
        if i == 0:
            after_first = len(checks)
    assert_compiled_once(mode, checks, after_first)


def test_block_gradients_under_unknown_sizes(mode, checks):
    set_mode(mode)
    params = weights()
    net = Block(params)
    grad = Grad(Loss(net), 0, net.trainable_params())
    grad.set_inputs(Tensor(shape=[None, None, IN], dtype=ms.float32))
    after_first = 0
    for i, batch in enumerate(BATCHES):
        x = randn(*batch, IN).requires_grad_(True)
        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        (torch_block(x, leaves) ** 2).sum().backward()
        dx, dweights = grad(to_ms(x.detach()))
        assert_same(dx, x.grad, **TOLERANCE)
        for name, got in zip(["w", "b", "ln_w", "ln_b"], dweights, strict=True):
            assert_same(got, leaves[name].grad, **TOLERANCE)
        if i == 0:
            after_first = len(checks)
    assert_compiled_once(mode, checks, after_first)


class ListsAndTuples(nn.Cell):
    """A Tensor[] input (cat) and multi-output ops (max.dim, topk, split) on unknown sizes."""

    def __init__(self):
        super().__init__()
        self.cat = ms_aten.op("cat", dim=1)
        self.max = ms_aten.op("max", dim=-1)
        self.topk = ms_aten.op("topk", k=2)
        self.split = ms_aten.op("split", split_size=3, dim=1)

    def construct(self, a, b):
        c = self.cat((a, b))
        values, indices = self.max(c)
        top, where = self.topk(c)
        parts = self.split(c)
        return c, values, indices, top, where, parts


def torch_lists(a, b):
    c = torch.cat((a, b), dim=1)
    return (c, *torch.max(c, dim=-1), *torch.topk(c, 2), torch.split(c, 3, dim=1))


class ListsLoss(nn.Cell):
    def __init__(self):
        super().__init__()
        self.net = ListsAndTuples()

    def construct(self, a, b):
        c, values, _, top, _, parts = self.net(a, b)
        return ((c * c).sum() + values.sum() + (top * top).sum() + (parts[1] * parts[0]).sum()
                + parts[2].sum())


def torch_lists_loss(a, b):
    c, values, _, top, _, parts = torch_lists(a, b)
    return ((c * c).sum() + values.sum() + (top * top).sum() + (parts[1] * parts[0]).sum()
            + parts[2].sum())


LIST_SHAPES = [((2, 4), (2, 4)), ((5, 4), (5, 4)), ((3, 4), (3, 4))]


def test_tensor_lists_and_multi_output_ops(mode, checks):
    set_mode(mode)
    net = ListsAndTuples()
    unknown = Tensor(shape=[None, 4], dtype=ms.float32)
    net.set_inputs(unknown, unknown)
    after_first = 0
    for i, (shape_a, shape_b) in enumerate(LIST_SHAPES):
        a, b = randn(*shape_a), randn(*shape_b) * 2
        got = net(to_ms(a), to_ms(b))
        expected = torch_lists(a, b)
        assert_same(got[:5], expected[:5])
        assert_same(got[5], tuple(expected[5]))
        if i == 0:
            after_first = len(checks)
    assert_compiled_once(mode, checks, after_first)


def test_tensor_lists_and_multi_output_gradients(mode, checks):
    set_mode(mode)
    grad = Grad(ListsLoss(), (0, 1))
    unknown = Tensor(shape=[None, 4], dtype=ms.float32)
    grad.set_inputs(unknown, unknown)
    after_first = 0
    for i, (shape_a, shape_b) in enumerate(LIST_SHAPES):
        a = randn(*shape_a).requires_grad_(True)
        b = (randn(*shape_b) * 2).requires_grad_(True)
        torch_lists_loss(a, b).backward()
        assert_same(grad(to_ms(a.detach()), to_ms(b.detach())), (a.grad, b.grad), **TOLERANCE)
        if i == 0:
            after_first = len(checks)
    assert_compiled_once(mode, checks, after_first)


def unknown_cell(op, *shapes) -> nn.Cell:
    from common import OpCell

    set_mode("graph")
    net = OpCell(op)
    net.set_inputs(*(Tensor(shape=s, dtype=ms.float32) for s in shapes))
    return net


def assert_still_works() -> None:
    x = randn(3, 4)
    net = unknown_cell(ms_aten.op("relu"), [None, 4])
    assert_same(net(to_ms(x)), x.relu())


def test_unknown_rank_gives_an_unknown_rank_output():
    net = unknown_cell(ms_aten.op("gelu"), None)
    for shape in [(3, 4), (2, 3, 5), (7,)]:
        x = randn(*shape)
        assert_same(net(to_ms(x)), F.gelu(x), **TOLERANCE)


def test_shape_that_cannot_be_inferred_names_the_op_and_the_input_shapes():
    # Every unknown size becomes one placeholder size, which cannot meet a static 16.
    net = unknown_cell(ms_aten.op("mm"), [None, None], [IN, OUT])
    with pytest.raises(RuntimeError, match=r"'aten::mm': cannot infer its outputs for input "
                                           r"shapes \[\[-1, -1\], \[16, 8\]\] with every unknown"):
        net(to_ms(randn(3, IN)), to_ms(randn(IN, OUT)))
    assert_still_works()


def test_output_count_that_depends_on_an_unknown_size_is_an_error():
    net = unknown_cell(ms_aten.op("split", split_size=2, dim=0), [None, 4])
    with pytest.raises(RuntimeError, match=r"'aten::split\.Tensor': for input shapes "
                                           r"\[\[-1, 4\]\], its number of outputs depends on"):
        net(to_ms(randn(6, 4)))
    assert_still_works()


def test_unknown_rank_an_op_cannot_handle_is_an_error():
    net = unknown_cell(ms_aten.op("split", split_size=2, dim=0), None)
    with pytest.raises(RuntimeError, match=r"'aten::split\.Tensor': cannot infer its outputs for "
                                           r"input shapes \[\[-2\]\]: it returns a tensor list"):
        net(to_ms(randn(6, 4)))
    assert_still_works()


def test_shape_error_at_run_time_names_the_op():
    # Compiles (the placeholder size fits), then the library's shape hook refuses one launch's
    # real size; MindSpore will not run that graph again after a failed step (its own rule).
    net = unknown_cell(ms_aten.op("narrow", dim=0, start=0, length=4), [None, 4])
    x = randn(6, 4)
    assert_same(net(to_ms(x)), x[:4])
    with pytest.raises(RuntimeError, match=r"ms_aten op 'aten::narrow': start \(0\) \+ length "
                                           r"\(4\) exceeds dimension size \(2\)"):
        net(to_ms(randn(2, 4)))
    assert_still_works()


def test_value_dependent_shape_under_unknown_sizes_is_refused_by_name():
    net = unknown_cell(ms_aten.op("nonzero"), [None, 4])
    with pytest.raises(ShapeInferenceError, match=r"'aten::nonzero'.*depends on input values"):
        net(to_ms(randn(3, 4)))
    assert_still_works()


def test_pynative_custom_route_infers_through_the_library(monkeypatch):
    """PYNATIVE without the fast path: MindSpore's C++ hook, told by __call__."""
    from ms_aten.native import pyboost

    monkeypatch.setattr(pyboost, "available", lambda: False)
    op = ms_aten.op("max", dim=0)
    for shape in [(3, 4), (5, 2)]:
        x = randn(*shape)
        assert_same(run(op, (to_ms(x),), "pynative"), tuple(torch.max(x, dim=0)))


def test_one_op_object_at_two_dtypes_in_one_dynamic_graph():
    op = ms_aten.op("neg")

    class TwoDtypes(nn.Cell):
        def __init__(self):
            super().__init__()
            self.op = op

        def construct(self, x, y):
            return self.op(x), self.op(y)

    set_mode("graph")
    net = TwoDtypes()
    net.set_inputs(Tensor(shape=[None], dtype=ms.float32), Tensor(shape=[None, 2], dtype=ms.int64))
    for n in (3, 6):
        x, y = randn(n), torch.arange(2 * n).reshape(n, 2)
        assert_same(net(to_ms(x), to_ms(y)), (-x, -y))


def test_zero_dim_output_stays_a_tensor_under_unknown_sizes():
    net = unknown_cell(ms_aten.op("sum"), [None, 4])
    out = net(to_ms(randn(5, 4)))
    assert isinstance(out, Tensor) and out.shape == ()
    np.testing.assert_allclose(out.asnumpy(), randn(5, 4).sum().numpy(), rtol=1e-5)
