"""Ops whose output shape depends on their input values run in PYNATIVE mode (ms_aten waits
for their inputs and runs them in ATen), with gradients where torch has them; GRAPH mode
refuses them at compile time (tests/test_errors.py). Also ops without a meta kernel whose
shapes torch's fake tensors still know (histogram)."""
from __future__ import annotations

import mindspore as ms
import pytest
import torch
from test_grad import ms_grads

import ms_aten
from ms_aten import fast_path

from common import assert_same, run, set_mode, to_ms, to_torch, torch_grads

g = torch.Generator().manual_seed(3)
X = torch.randn(4, 5, generator=g)
MASK = X > 0.2
aten = torch.ops.aten


@pytest.fixture(autouse=True)
def needs_fast_path():
    if not fast_path.available():
        pytest.skip("fast-path module not built (python -m ms_aten.fast_path)")


# (op, constants, call-time inputs, torch reference)
CASES = [
    ("nonzero", {}, (X > 0,), torch.nonzero),
    ("nonzero", {}, (torch.zeros(3, 2),), torch.nonzero),  # an empty result
    ("argwhere", {}, (X,), torch.argwhere),
    ("masked_select", {}, (X, MASK), torch.masked_select),
    ("index.Tensor", {}, (X, (MASK[:, 0],)), lambda x, i: x[i[0]]),
    ("index.Tensor", {}, (X, (None, MASK[0])), lambda x, i: x[:, i[1]]),  # a None hole
    ("_unique2", {"return_inverse": True, "return_counts": True},
     (torch.tensor([3, 1, 3, 2, 1]),), lambda x: aten._unique2(x, True, True, True)),
    ("unique_consecutive", {"return_counts": True}, (torch.tensor([1, 1, 2, 2, 3, 1]),),
     lambda x: aten.unique_consecutive(x, False, True)),
    ("unique_dim", {"dim": 0}, (torch.tensor([[1, 2], [1, 2], [0, 1]]),),
     lambda x: aten.unique_dim(x, 0)),
    ("nonzero", {}, (torch.tensor([0.0, 1.5, 0.0], dtype=torch.bfloat16),), torch.nonzero),
]


@pytest.mark.parametrize("name, constants, inputs, reference", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_value_dependent_op_runs_in_pynative(name, constants, inputs, reference):
    result = run(ms_aten.op(name, **constants), to_ms(inputs), "pynative")
    expected = reference(*inputs)
    assert_same(result, tuple(expected) if isinstance(expected, (tuple, list)) else expected)


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
])
def test_gradients_of_value_dependent_ops(name, inputs, reference):
    expected_out = reference(*inputs)
    weights = [torch.randn(expected_out.shape, generator=g)]
    expected = torch_grads(reference, inputs, weights)
    got = ms_grads(ms_aten.op(name), inputs, weights, "pynative")
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


def test_the_same_op_is_refused_in_graph_mode_and_runs_again_in_pynative():
    op = ms_aten.op("nonzero")
    with pytest.raises(ms_aten.infer.ValueDependentError, match=r"nonzero_static"):
        run(op, (to_ms(MASK),), "graph")
    assert_same(run(op, (to_ms(MASK),), "pynative"), torch.nonzero(MASK))
    assert ms.get_context("mode") == ms.PYNATIVE_MODE


def test_the_static_alternative_works_in_both_modes(mode):
    op = ms_aten.op("nonzero_static", size=12, fill_value=-1)
    assert_same(run(op, (to_ms(MASK),), mode), torch.nonzero_static(MASK, size=12))


@pytest.mark.parametrize("dtype", [torch.uint64, torch.uint32, torch.int8])
def test_a_value_dependent_op_takes_unsigned_dtypes(dtype):
    # PYNATIVE only: these ops refuse GRAPH mode (above). MindSpore's uint64 arrives in numpy
    # as ulonglong, which torch.from_numpy refuses unless it is made uint64.
    x = torch.tensor([3, 0, 7, 3, 7, 1], dtype=dtype)
    set_mode("pynative")
    assert_same(ms_aten.op("_unique2", return_counts=True)(to_ms(x)),
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
