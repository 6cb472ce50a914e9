"""Ops that write their inputs in place (ms_aten.ops.mutating, csrc/op/mutate.h): the named
Parameters change in place, in both modes, in program order; nothing else is written."""
from __future__ import annotations

import re

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor

import ms_aten
from ms_aten.ops.mutating import MutatingOp

from common import BridgeKernel, set_mode


def parameters() -> tuple[Parameter, Parameter]:
    return (Parameter(Tensor(np.arange(4, dtype=np.float32)), name="a"),
            Parameter(Tensor(np.ones((2, 3), np.float32)), name="b"))


def test_foreach_add_writes_every_parameter_in_program_order(mode):
    """Reads before the op see the old values, reads after it the new ones, in GRAPH mode as in
    PYNATIVE: the op is a side effect that MindSpore neither drops nor moves."""
    set_mode(mode)
    a, b = parameters()
    add = MutatingOp("_foreach_add_.Scalar", {"self": 2}, ("self",), scalar=10.0)

    def step(x):
        before = a * x
        add(a, b)
        return before, a * x, b * x

    if mode == "graph":
        step = ms.jit(step)
    launches = ms_aten.launch_count()
    before, after, b_after = step(Tensor(1.0, ms.float32))
    np.testing.assert_array_equal(before.asnumpy(), np.arange(4))
    np.testing.assert_array_equal(after.asnumpy(), np.arange(4) + 10)
    np.testing.assert_array_equal(b_after.asnumpy(), np.full((2, 3), 11))
    np.testing.assert_array_equal(a.asnumpy(), np.arange(4) + 10)  # the Parameter itself
    assert ms_aten.launch_count() - launches == 1  # read after the results: launches are async


def test_a_written_argument_not_named_is_copied_not_written(mode):
    """_amp_foreach_non_finite_check_and_unscale_ writes both its tensors (it unscales `self`
    and sets `found_inf`); named to write found_inf only, it leaves `self` as it was."""
    set_mode(mode)
    values = Parameter(Tensor(np.array([1.0, np.inf, 4.0], np.float32)), name="values")
    found = Parameter(Tensor(np.zeros(1, np.float32)), name="found_inf")
    check = MutatingOp("_amp_foreach_non_finite_check_and_unscale_", {"self": 1},
                       ("found_inf",))

    def run(inverse_scale):
        check(values, found, inverse_scale)
        return values * 1

    if mode == "graph":
        run = ms.jit(run)
    np.testing.assert_array_equal(run(Tensor([0.5], ms.float32)).asnumpy(), [1.0, np.inf, 4.0])
    np.testing.assert_array_equal(found.asnumpy(), [1.0])
    np.testing.assert_array_equal(values.asnumpy(), [1.0, np.inf, 4.0])


@pytest.mark.parametrize("make, error, message", [
    (lambda: MutatingOp("add_.Tensor", {}, ("other",)), ValueError,
     "does not write an argument 'other'; it writes ['self']"),
    (lambda: MutatingOp("add.Tensor", {}, ()), TypeError, "it returns new tensors"),
    (lambda: MutatingOp("_foreach_add_.Scalar", {}, ("self",), scalar=1.0), TypeError,
     "give the length of the tensor list 'self'"),
    (lambda: MutatingOp("_foreach_add_.Scalar", {"self": 1}, ("self",)), TypeError,
     "give argument 'scalar' (number) as a constant"),
    (lambda: MutatingOp("add_.nope", {}, ("self",)), ValueError, "has no overload 'nope'"),
])
def test_bad_mutating_ops_are_errors(make, error, message):
    with pytest.raises(error, match=re.escape(message)):
        make()


def test_wrong_tensor_count_is_a_type_error():
    set_mode("pynative")
    a, b = parameters()
    add = MutatingOp("_foreach_add_.Scalar", {"self": 2}, ("self",), scalar=1.0)
    with pytest.raises(TypeError, match="takes 2 tensors \\(self: 2\\), got 1"):
        add(a)


@pytest.mark.parametrize("spec, message", [
    ("call aten::add_ Tensor 0 u0 t1 f1",
     "only a program node or a mutate spec writes its tensors"),
    ("call aten::add_ Tensor 1 t0 t1 f1",
     "aten::add_.Tensor writes argument 'self': mark it u<j>"),
    ("out aten::add_ Tensor 0 u0 t1 f1",
     "written tensors (u, U tokens) need the 'mutate' or 'call' kind"),
    ("mutate aten::add_ Tensor 0 t0 u1 f1",
     "argument 'other' is marked written, but aten::add_.Tensor does not write it"),
    ("mutate aten::add_ Tensor 0 t0 t1 f1", "a mutate spec marks the tensors the op writes"),
    ("mutate aten::add_ Tensor 1 u0 t1 f1", "a mutate spec has output count 0"),
    ("mutate aten::_foreach_add_ Scalar 0 U f1", "U and R lists name their members"),
    ("mutate aten::add_ Tensor 0 u0 r1 f1",
     "argument 'other' is marked unwritten (r, R tokens), which a mutate spec says of an "
     "argument its op's schema writes"),
    ("call aten::add Tensor 1 r0 t1 f1", "argument 'self' is marked unwritten"),
])
def test_malformed_mutate_specs_fail_at_launch_naming_why(spec, message):
    with BridgeKernel(spec) as kernel:
        assert message in kernel.launch([np.zeros(2, np.float32)] * 3)


def test_mutate_spec_writes_the_buffer_through_the_c_api():
    self, other = np.arange(3, dtype=np.float32), np.full(3, 2.0, np.float32)
    with BridgeKernel("mutate aten::add_ Tensor 0 u0 t1 f3") as kernel:
        assert kernel.launch([self, other, np.zeros(0, np.bool_)]) == ""
    np.testing.assert_array_equal(self, [6.0, 7.0, 8.0])
    np.testing.assert_array_equal(other, [2.0, 2.0, 2.0])
