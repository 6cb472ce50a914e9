"""The generic bridge against torch eager: ops, overload resolution, lists, dtypes, edge cases."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ms_aten

from common import assert_same, randn, run, to_ms

X, Y, B = randn(3, 4), randn(4), randn(2, 3, 4)
C = torch.complex(randn(3, 4), randn(3, 4))
IDX = torch.tensor([[0, 2], [1, 3], [2, 0]])

# (ms_aten name, constants, inputs, torch eager reference)
CASES = [
    ("add", {"alpha": 2}, (X, Y), lambda x, y: torch.add(x, y, alpha=2)),
    ("add", {"other": 2.5}, (X,), lambda x: x + 2.5),
    ("where.self", {}, (X > 0, X, Y), torch.where),
    ("clamp", {"min": -0.5, "max": 0.5}, (X,), lambda x: x.clamp(-0.5, 0.5)),
    ("clamp.Tensor", {}, (X, -Y.abs(), Y.abs()), torch.clamp),
    ("sum.dim_IntList", {"dim": [1], "keepdim": True}, (X,), lambda x: x.sum(1, keepdim=True)),
    ("sum", {"dtype": torch.float64}, (X,), lambda x: x.sum(dtype=torch.float64)),
    ("mean.dim", {"dim": [0, 2]}, (B,), lambda b: b.mean((0, 2))),
    ("amax", {"dim": [0]}, (X,), lambda x: x.amax(0)),
    ("max.dim", {"dim": 1, "keepdim": True}, (X,), lambda x: tuple(x.max(1, keepdim=True))),
    ("topk", {"k": 2}, (X,), lambda x: tuple(x.topk(2))),
    ("sort", {"dim": 0, "descending": True}, (X,), lambda x: tuple(x.sort(0, descending=True))),
    ("var_mean.correction", {"dim": [1]}, (X,), lambda x: torch.var_mean(x, 1)),
    ("cat", {"dim": 1}, ((X, X * 2),), lambda xs: torch.cat(xs, 1)),
    ("stack", {}, ((X, X, X),), torch.stack),
    ("index.Tensor", {}, (X, (IDX[:, 0], IDX[:, 1] % 3)), lambda x, i: x[i]),
    ("layer_norm", {"normalized_shape": [4]}, (X, Y, Y),
     lambda x, w, b: F.layer_norm(x, [4], w, b)),
    ("layer_norm", {"normalized_shape": [4], "weight": None, "bias": None}, (X,),
     lambda x: F.layer_norm(x, [4])),
    ("mm", {}, (X, X.T.contiguous()), torch.mm),
    ("bmm", {}, (B, B.transpose(1, 2).contiguous()), torch.bmm),
    ("addmm", {"beta": 0.5}, (Y, X, randn(4, 4)), lambda c, a, b: torch.addmm(c, a, b, beta=0.5)),
    ("addmm", {"beta": 0.5 - 1j, "alpha": 2j}, (C[:, :3].contiguous(), C, C.T.contiguous()),
     lambda c, a, b: torch.addmm(c, a, b, beta=0.5 - 1j, alpha=2j)),  # complex Scalars
    ("mul.Tensor", {"other": 1 + 2j}, (C,), lambda c: c * (1 + 2j)),  # wrapped complex number
    ("conv2d", {"padding": 1, "stride": 2}, (randn(1, 2, 5, 5), randn(3, 2, 3, 3), randn(3)),
     lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1)),
    ("embedding", {}, (randn(10, 3), IDX), lambda w, i: F.embedding(i, w)),
    ("gather", {"dim": 1}, (X, IDX), lambda x, i: x.gather(1, i)),
    ("cumsum", {"dim": 1}, (X,), lambda x: x.cumsum(1)),
    ("softmax.int", {"dim": -1}, (X,), lambda x: x.softmax(-1)),
    ("transpose.int", {"dim0": 0, "dim1": 1}, (X,), lambda x: x.t()),  # a view: copied out
    ("split.Tensor", {"split_size": 2, "dim": 1}, (X,), lambda x: x.split(2, 1)),  # Tensor[] out
    ("gelu", {"approximate": "tanh"}, (X,), lambda x: F.gelu(x, approximate="tanh")),
    ("arange.start_step", {"start": 0, "end": 5, "step": 2, "dtype": torch.float32}, (),
     lambda: torch.arange(0, 5, 2, dtype=torch.float32)),  # no tensor inputs at all
]


@pytest.mark.parametrize("name, constants, inputs, reference", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_op_matches_torch(mode, name, constants, inputs, reference):
    op = ms_aten.op(name, **constants)
    assert_same(run(op, to_ms(inputs), mode), reference(*inputs))


def test_zero_dim_output_is_a_zero_dim_tensor(mode):
    result = run(ms_aten.op("sum"), (to_ms(X),), mode)
    assert result.shape == ()
    assert_same(result, X.sum())


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2)])
def test_zero_dim_and_zero_size_inputs(mode, shape):
    x = randn(*shape)
    assert_same(run(ms_aten.op("mul.Tensor"), to_ms((x, x)), mode), x * x)
    assert_same(run(ms_aten.op("sum.dim_IntList", dim=[-1] if shape else []), to_ms((x,)), mode),
                x.sum(-1) if shape else x.sum())


def test_broadcasting_and_type_promotion(mode):
    a, b = randn(2, 1, 3), torch.arange(4, dtype=torch.int32).reshape(4, 1)
    assert_same(run(ms_aten.op("add.Tensor"), to_ms((a, b)), mode), a + b)


def test_each_op_object_gets_its_own_kernel(mode):
    # Same func and the same constants except the slope: MindSpore must not share a kernel.
    slopes = (0.1, 0.5)
    ops_ = [ms_aten.op("leaky_relu", negative_slope=s) for s in slopes]
    assert len({o.attrs["ms_aten_uid"] for o in ops_}) == 2
    for op, slope in zip(ops_, slopes, strict=True):
        assert_same(run(op, (to_ms(X),), mode), F.leaky_relu(X, slope))


def test_out_variant_is_used_where_it_exists():
    spec = ms_aten.op("max.dim", dim=0).attrs["ms_aten_spec"]
    assert spec == "call aten::max dim 2 t0 i0 D;out aten::max dim_max 2 t0 i0 D o0 o1"
    assert ";" not in ms_aten.op("conv2d").attrs["ms_aten_spec"]


@pytest.mark.parametrize("name, constants, expected", [
    ("add", {"other": 2.0}, "aten::add.Scalar"),
    ("add", {}, "aten::add.Tensor"),
    ("aten::max.dim", {"dim": 0}, "aten::max.dim"),
    ("max", {"dim": 0}, "aten::max.dim"),
    ("sum", {"dim": [0]}, "aten::sum.dim_IntList"),
])
def test_overload_resolution(name, constants, expected):
    assert ms_aten.op(name, **constants).binding.name == expected


@pytest.fixture(scope="module")
def user_library():
    """Ops registered from Python with torch.library, as a user would."""
    lib = torch.library.Library("ms_aten_test", "DEF")
    lib.define("scale(Tensor x, float factor) -> Tensor")
    lib.impl("scale", lambda x, factor: x * factor, "CPU")
    lib.impl("scale", lambda x, factor: torch.empty_like(x), "Meta")
    # An out= overload that resizes its output, as a buggy kernel might.
    lib.define("shrink(Tensor x) -> Tensor")
    lib.define("shrink.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    lib.impl("shrink", lambda x: x.clone(), "CPU")
    lib.impl("shrink", lambda x: torch.empty_like(x), "Meta")
    lib.impl("shrink.out", lambda x, *, out: out.resize_(1).fill_(0), "CPU")
    yield lib
    lib._destroy()


def test_user_op_registered_with_torch_library(mode, user_library):
    assert_same(run(ms_aten.op("ms_aten_test::scale", factor=3.0), (to_ms(X),), mode), X * 3)


def test_out_kernel_that_resizes_its_output_falls_back_to_the_functional(mode, user_library):
    # shrink.out writes a 1-element result somewhere MindSpore cannot see; the functional
    # overload's result must arrive instead, every time.
    op = ms_aten.op("ms_aten_test::shrink")
    for _ in range(2):
        assert_same(run(op, (to_ms(X),), mode), X)


def test_mse_loss_whose_out_variant_resizes(mode):
    # torch's mse_loss.out resizes its 0-dim output; the functional result must arrive.
    a, b = randn(5, 3), randn(5, 3)
    assert_same(run(ms_aten.op("mse_loss"), to_ms((a, b)), mode), F.mse_loss(a, b))
