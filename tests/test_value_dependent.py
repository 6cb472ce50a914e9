"""Ops whose output shape depends on their input values, with gradients where torch has them:
PYNATIVE mode waits for their inputs and runs them in ATen; GRAPH mode pads their outputs to
torch's upper bound and cuts the result out with MindSpore's Slice (ms_aten/ops/bounded.py), and
refuses at compile time those torch cannot bound (here and in tests/test_errors.py). Also ops
without a meta kernel whose shapes torch's fake tensors still know (histogram)."""
from __future__ import annotations

import mindspore as ms
import pytest
import torch
from mindspore import nn
from test_grad import ms_grads

import ms_aten
from ms_aten.native import pyboost

from common import assert_same, run, set_mode, to_ms, to_torch, torch_grads

g = torch.Generator().manual_seed(3)
X = torch.randn(4, 5, generator=g)
MASK = X > 0.2
Y = torch.randn(4, 5, 3, generator=g)
aten = torch.ops.aten


@pytest.fixture(autouse=True)
def needs_fast_path():
    if not pyboost.available():
        pytest.skip("fast-path module not built (python -m ms_aten.native.pyboost)")


# (op, constants, call-time inputs, torch reference)
CASES = [
    ("nonzero", {}, (X > 0,), torch.nonzero),
    ("nonzero", {}, (torch.zeros(3, 2),), torch.nonzero),  # an empty result
    ("nonzero", {}, (torch.tensor(3.0),), torch.nonzero),  # 0-dim: a (1, 0) result
    ("nonzero", {}, (torch.zeros(2, 0, 4),), torch.nonzero),  # zero-size: shapes known ahead
    ("masked_select", {}, (torch.tensor(1.5), MASK), torch.masked_select),  # broadcast 0-dim
    ("masked_select", {}, (X[0], MASK), torch.masked_select),  # self broadcast to the mask
    ("argwhere", {}, (X,), torch.argwhere),
    ("masked_select", {}, (X, MASK), torch.masked_select),
    ("index.Tensor", {}, (X, (MASK[:, 0],)), lambda x, i: x[i[0]]),
    ("index.Tensor", {}, (Y, (MASK,)), lambda x, i: x[i[0]]),  # a 2-D mask
    ("index.Tensor", {}, (X, (torch.tensor([3, 0, 3]),)), lambda x, i: x[i[0]]),  # not varying
    ("_unique2", {"return_inverse": True, "return_counts": True},
     (torch.tensor([3, 1, 3, 2, 1]),), lambda x: aten._unique2(x, True, True, True)),
    ("unique_consecutive", {"return_counts": True}, (torch.tensor([1, 1, 2, 2, 3, 1]),),
     lambda x: aten.unique_consecutive(x, False, True)),
    ("unique_dim", {"dim": 0}, (torch.tensor([[1, 2], [1, 2], [0, 1]]),),
     lambda x: aten.unique_dim(x, 0)),
    # torch's fake kernel takes dim=-1 as it is and says the inverse of a `dim` call always
    # exists: GRAPH mode's bounds fix the first and cut every output (bounded.py).
    ("unique_consecutive", {"dim": -1}, (torch.tensor([[1, 1, 2], [1, 1, 3]]),),
     lambda x: aten.unique_consecutive(x, dim=-1)),
    ("unique_consecutive", {"dim": 0, "return_counts": True}, (torch.tensor([1, 1, 0, 1]),),
     lambda x: aten.unique_consecutive(x, False, True, 0)),
    ("nonzero", {}, (torch.tensor([0.0, 1.5, 0.0], dtype=torch.bfloat16),), torch.nonzero),
    ("masked_select", {}, (X.bfloat16(), MASK), torch.masked_select),  # no bfloat16 Slice
    ("unique_dim", {"dim": 1, "return_counts": True},
     (torch.tensor([[1.5, 1.5, 2.0], [0.5, 0.5, 1.0]], dtype=torch.bfloat16),),
     lambda x: aten.unique_dim(x, 1, return_counts=True)),
    ("unique_dim", {"dim": 1}, (torch.zeros(5, 0, 5, dtype=torch.bfloat16),),
     lambda x: aten.unique_dim(x, 1)),
]


@pytest.mark.parametrize("name, constants, inputs, reference", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_value_dependent_op_matches_torch(mode, name, constants, inputs, reference):
    result = run(ms_aten.op(name, **constants), to_ms(inputs), mode)
    expected = reference(*inputs)
    assert_same(result, tuple(expected) if isinstance(expected, (tuple, list)) else expected)


def test_a_none_hole_in_a_bool_index_runs_in_pynative():
    # GRAPH mode cannot hand a None inside a tuple to a Custom kernel (tests/test_errors.py).
    result = run(ms_aten.op("index.Tensor"), to_ms((X, (None, MASK[0]))), "pynative")
    assert_same(result, X[:, MASK[0]])


def test_ops_with_other_constants_over_the_same_shapes_keep_their_own_shapes():
    # Op objects come and go (an OpInfo sweep makes thousands); each keeps its own bounds.
    x = torch.tensor([[1, 1, 2], [1, 1, 2], [3, 3, 3]])
    for _ in range(3):
        for dim in (0, 1, None):
            got = run(ms_aten.op("unique_consecutive", dim=dim, return_counts=True), (to_ms(x),),
                      "graph")
            assert_same(got, tuple(aten.unique_consecutive(x, False, True, dim)))


class MaskedSum(nn.Cell):
    """A value-dependent op between other ops, ms_aten's and MindSpore's."""

    def __init__(self):
        super().__init__()
        self.select, self.exp = ms_aten.op("masked_select"), ms_aten.op("exp")
        # MindSpore 2.10's own ReduceSum returns uninitialized memory for a zero-size input of
        # unknown size (4e-45 for a sum of nothing).
        self.sum = ms_aten.op("sum")

    def construct(self, x, mask):
        picked = self.select(x, mask)
        return self.exp(picked) * 2, self.sum(picked)


def test_one_compiled_graph_sizes_each_run_by_its_values():
    set_mode("graph")
    net = MaskedSum()
    for threshold in (0.2, 1.0, 5.0, -5.0):  # 13, 4, 0 and 20 elements, same input shapes
        mask = X > threshold
        assert_same(net(to_ms(X), to_ms(mask)),
                    (X[mask].exp() * 2, X[mask].sum()))


def test_each_call_launches_one_bridge_kernel_in_graph_mode():
    # The padded kernel for a bool mask, the op's own for integer indices; the Slice that cuts
    # the result out is MindSpore's.
    set_mode("graph")
    op = ms_aten.op("index.Tensor")
    counts = []
    for index in (MASK[:, 0], torch.tensor([1, 0])):
        before = ms_aten.launch_count()
        run(op, to_ms((X, (index,))), "graph").asnumpy()
        counts.append(ms_aten.launch_count() - before)
    assert counts == [1, 1]
    assert op.padded.attrs["ms_aten_spec"].startswith("bounded aten::index Tensor 1 ")


def test_inputs_still_being_computed_are_waited_for():
    set_mode("pynative")
    x = to_ms(X)
    relu, nonzero, add = ms_aten.op("relu"), ms_aten.op("nonzero"), ms_aten.op("add.Tensor")
    for _ in range(3):  # queued producers, then the value-dependent op, then a consumer
        y = relu(add(x, x))
        assert_same(add(nonzero(y), 1), torch.nonzero((X + X).relu()) + 1)


@pytest.mark.parametrize("name, inputs, reference", [
    ("masked_select", (X, MASK), torch.masked_select),
    ("index.Tensor", (X, (MASK[:, 1],)), lambda x, i: x[i[0]]),
    ("index.Tensor", (Y.double(), (MASK,)), lambda x, i: x[i[0]]),
])
def test_gradients_of_value_dependent_ops(mode, name, inputs, reference):
    expected_out = reference(*inputs)
    weights = [torch.randn(expected_out.shape, generator=g, dtype=expected_out.dtype)]
    expected = torch_grads(reference, inputs, weights)
    got = ms_grads(ms_aten.op(name), inputs, weights, mode)
    torch.testing.assert_close(to_torch(got[0]), expected[0])


def test_value_dependent_errors_name_the_op():
    set_mode("pynative")
    with pytest.raises(RuntimeError, match=r"aten::masked_select.*must match"):
        ms_aten.op("masked_select")(to_ms(X), to_ms(torch.ones(3, dtype=torch.bool)))
    assert_same(ms_aten.op("nonzero")(to_ms(MASK)), torch.nonzero(MASK))


@pytest.mark.parametrize("name, constants, inputs, reference", [
    ("histc", {"bins": 4, "min": -1, "max": 1}, (X,), lambda x: torch.histc(x, 4, -1, 1)),
    ("histogram.bin_ct", {"bins": 5}, (X,), lambda x: tuple(torch.histogram(x, 5))),
    ("histogram.bins_tensor", {}, (X, torch.linspace(-2, 2, 6)),
     lambda x, b: tuple(torch.histogram(x, b))),
])
def test_histograms_have_static_shapes_in_both_modes(mode, name, constants, inputs, reference):
    assert_same(run(ms_aten.op(name, **constants), to_ms(inputs), mode), reference(*inputs))


def test_an_op_without_a_meta_kernel_has_static_shapes_in_both_modes(mode):
    # aten::geqrf has no meta kernel: the C++ hook cannot size it, torch's fake tensors can.
    x = torch.randn(5, 3, generator=g)
    assert_same(run(ms_aten.op("geqrf"), (to_ms(x),), mode), tuple(torch.geqrf(x)))


def test_an_op_torch_cannot_bound_is_refused_in_graph_mode_and_runs_in_pynative():
    # bincount's size is its largest value: torch's fake kernel gives it no upper bound.
    op, x = ms_aten.op("bincount"), torch.tensor([1, 4, 1, 0])
    with pytest.raises(ms_aten.ValueDependentError,
                       match=r"'aten::bincount'.*depends on input values.*torch gives none"):
        run(op, (to_ms(x),), "graph")
    assert_same(run(op, (to_ms(x),), "pynative"), torch.bincount(x))
    assert ms.get_context("mode") == ms.PYNATIVE_MODE


def test_set_device_moves_both_kernels():
    op = ms_aten.op("nonzero")
    assert op.set_device("CPU") is op
    assert_same(run(op, (to_ms(MASK),), "graph"), torch.nonzero(MASK))


def test_the_static_alternative_works_in_both_modes(mode):
    op = ms_aten.op("nonzero_static", size=12, fill_value=-1)
    assert_same(run(op, (to_ms(MASK),), mode), torch.nonzero_static(MASK, size=12))


@pytest.mark.parametrize("dtype", [torch.uint64, torch.uint32, torch.int8])
def test_a_value_dependent_op_takes_unsigned_dtypes(mode, dtype):
    # MindSpore's uint64 arrives in numpy as ulonglong, which torch.from_numpy refuses unless
    # it is made uint64.
    x = torch.tensor([3, 0, 7, 3, 7, 1], dtype=dtype)
    assert_same(run(ms_aten.op("_unique2", return_counts=True), (to_ms(x),), mode),
                tuple(torch.ops.aten._unique2(x, return_counts=True)))


def test_a_number_in_a_value_dependent_op():
    # torch wraps the number: a float64 0-dim tensor, broadcast against the mask.
    result = run(ms_aten.op("masked_select"), (2.0, to_ms(MASK)), "pynative")
    assert_same(result, torch.masked_select(torch.tensor(2.0, dtype=torch.float64), MASK))


def test_value_dependent_op_with_a_0_dim_output():
    # linalg_lstsq's residuals depend on the rank it finds; its rank output is 0-dim.
    a, b = torch.randn(5, 3, generator=g), torch.randn(5, 2, generator=g)
    result = run(ms_aten.op("linalg_lstsq", driver="gelsd"), to_ms((a, b)), "pynative")
    expected = tuple(aten.linalg_lstsq(a, b, driver="gelsd"))
    assert result[2].shape == ()
    assert_same(result, expected, rtol=1e-4, atol=1e-5)
