"""libms_aten.so's C surface, driven through ctypes: spec decoding, dtypes, errors."""
from __future__ import annotations

import numpy as np
import pytest

from common import BridgeKernel


def launch(spec: str, arrays: list[np.ndarray], dtype_names: list[str] | None = None) -> str:
    """Runs `spec` on numpy buffers (inputs, then outputs) as MindSpore would; '' or the error."""
    with BridgeKernel(spec) as kernel:
        return kernel.launch(arrays, dtype_names)


ABS = "call aten::abs . 1 t0;out aten::abs out 1 t0 o0"


def test_out_variant_writes_into_the_output_buffer():
    x = np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32)
    out = np.zeros_like(x)
    assert launch(ABS, [x, out]) == ""
    np.testing.assert_array_equal(out, np.abs(x))


def test_zero_dim_buffers_have_null_shapes():
    x = np.array(-3.0, np.float64)
    out = np.zeros((), np.float64)
    assert launch("call aten::neg . 1 t0", [x, out]) == ""
    assert out == 3.0


def test_unknown_dtype_string_is_an_error_not_a_float32_fallback():
    x = np.ones(4, np.float32)
    error = launch(ABS, [x, x.copy()], ["float8", "float32"])
    assert "unsupported MindSpore dtype 'float8'" in error


@pytest.mark.parametrize("spec, message", [
    ("call aten::not_an_op . 1 t0", "operator aten::not_an_op is not registered in torch"),
    ("call /tmp/evil.so . 1 t0", "is not registered in torch"),
    ("call aten::abs . 1", "aten::abs takes 1 arguments, the spec has 0"),
    ("call aten::abs . 1 ?x", "unknown argument token '?x'"),
    ("sideways aten::abs . 1 t0", "unknown kind 'sideways'"),
    ("out aten::abs out 1 t0 o0", "expected '<call or vjp spec>[;<out spec>]'"),
    ("bounded aten::split_copy Tensor * t0 i1 i0", "a bounded call needs a fixed number of"),
])
def test_bad_specs_fail_at_launch_with_the_reason(spec, message):
    x = np.ones(3, np.float32)
    assert message in launch(spec, [x, x.copy()])


def test_functional_result_must_match_the_inferred_output():
    x = np.ones((2, 3), np.float32)
    wrong = np.zeros((3, 2), np.float32)
    assert "came out as Float[2, 3], but MindSpore expects Float[3, 2]" in launch(
        "call aten::relu . 1 t0", [x, wrong])


def test_aten_errors_cross_the_boundary_as_messages():
    a, b = np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)
    spec = "call aten::mm . 1 t0 t1;out aten::mm out 1 t0 t1 o0"
    message = launch(spec, [a, b, np.zeros((2, 3), np.float32)])
    assert "ms_aten: aten::mm: mat1 and mat2 shapes cannot be multiplied" in message


def test_a_bounded_call_writes_the_leading_corner_and_the_shape():
    # GRAPH mode's route for value-dependent ops (ms_aten/ops/bounded.py): nonzero of a 2x3 input
    # padded to its 6 possible rows; the shape output says how many rows are real.
    x = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0]], np.float32)
    padded, shape = np.full((6, 2), -7, np.int64), np.zeros(2, np.int64)
    assert launch("bounded aten::nonzero . 1 t0", [x, padded, shape]) == ""
    np.testing.assert_array_equal(shape, [3, 2])
    np.testing.assert_array_equal(padded[:3], np.argwhere(x))
    assert (padded[3:] == -7).all()  # the padding stays as it was: Slice never reads it


def test_a_result_over_its_bound_is_an_error_not_an_overflow():
    x = np.ones(4, np.float32)
    padded, shape = np.zeros((3, 1), np.int64), np.zeros(2, np.int64)
    assert "output 0 came out as Long[4, 1], which does not fit its bound Long[3, 1]" in launch(
        "bounded aten::nonzero . 1 t0", [x, padded, shape])
