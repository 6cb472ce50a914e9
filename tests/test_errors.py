"""Bad input becomes a precise Python exception, and the process keeps working."""
from __future__ import annotations

import pytest
import torch

import ms_aten
from ms_aten import ShapeInferenceError

from common import assert_same, run, to_ms

X = torch.randn(3, 4)


def assert_still_works(mode: str) -> None:
    torch.testing.assert_close(
        torch.from_numpy(run(ms_aten.op("relu"), (to_ms(X),), mode).asnumpy()), X.relu())


def test_unknown_op_suggests_close_names():
    with pytest.raises(ValueError, match=r"unknown op 'aten::leaky_rlu'.*'aten::leaky_relu'"):
        ms_aten.op("leaky_rlu")


def test_unknown_overload_lists_the_real_ones():
    with pytest.raises(ValueError, match=r"no overload 'nope'(.|\n)*aten::max\.dim"):
        ms_aten.op("max.nope")


def test_unknown_constant_shows_the_schema():
    pattern = r"no argument named slope\n  schema: aten::leaky_relu\(Tensor self, Scalar neg"
    with pytest.raises(TypeError, match=pattern):
        ms_aten.op("leaky_relu", slope=0.2)


@pytest.mark.parametrize("name, constants, pattern", [
    ("aten::leaky_relu", {"negative_slope": "big"},
     r"'negative_slope' \(number\) expects number, got 'big'"),
    ("aten::sum.dim_IntList", {"dim": [1.5]}, r"'dim'.*expects a list of ints, got \[1\.5\]"),
    ("aten::sum.dim_IntList", {"dim": [1], "dtype": torch.float8_e4m3fn}, r"'dtype'.*no MindSpore"),
    ("aten::mm", {"mat2": X}, r"'mat2' \(Tensor\) is a tensor: pass it at call time"),
    ("aten::add_.Tensor", {}, r"in-place and out= overloads write their inputs"),
])
def test_ill_typed_constant_names_argument_and_value(name, constants, pattern):
    with pytest.raises(TypeError, match=pattern):
        ms_aten.op(name, **constants)


def test_ambiguous_overload_lists_candidates():
    with pytest.raises(TypeError, match=r"is ambiguous(.|\n)*aten::where\.self"):
        ms_aten.op("where")


def test_wrong_tensor_count(mode):
    with pytest.raises(TypeError, match=r"'aten::mm' takes 2 tensors \(self, mat2\), got 1"):
        run(ms_aten.op("mm"), to_ms((X,)), mode)
    assert_still_works(mode)


def test_aten_shape_error_is_a_runtime_error_with_atens_message(mode):
    with pytest.raises(RuntimeError, match=r"aten::mm.*must have same reduction dim"):
        run(ms_aten.op("mm"), to_ms((X, X)), mode)
    assert_still_works(mode)


def test_kernel_error_reaches_python_and_the_next_op_runs(mode):
    # Index 5 is only checked by the CPU kernel: the error crosses the C++ barrier.
    pattern = r"ms_aten: aten::index\.Tensor.*index 5 is out of bounds"
    with pytest.raises(RuntimeError, match=pattern):
        # PYNATIVE launches asynchronously: the error surfaces at the next sync (asnumpy).
        run(ms_aten.op("index.Tensor"), to_ms((X, (torch.tensor([5]),))), mode).asnumpy()
    assert_still_works(mode)


@pytest.mark.parametrize("name, inputs, alternative", [
    ("bincount", (torch.tensor([2, 0]),), r"ATen has no static form"),
    ("linalg_lstsq", (X, X), r"PYNATIVE mode"),
    ("repeat_interleave.Tensor", (torch.tensor([2, 0]),), r"PYNATIVE mode"),
])
def test_a_value_dependent_shape_without_a_bound_is_refused_in_graph_mode(name, inputs,
                                                                          alternative):
    # GRAPH mode pads nonzero, unique, masked_select, x[mask] to torch's upper bound
    # (tests/test_value_dependent.py); these have none, and PYNATIVE runs them.
    with pytest.raises(ShapeInferenceError, match=rf"'aten::{name.split('.')[0]}.*depends on "
                                                  rf"input values(.|\n)*{alternative}"):
        run(ms_aten.op(name), to_ms(inputs), "graph")
    assert_still_works("graph")


def test_unsupported_dtype_for_the_kernel(mode):
    flags = torch.tensor([True, False])
    with pytest.raises(RuntimeError, match=r"'Bool'"):
        run(ms_aten.op("cumprod", dim=0, dtype=torch.bool), to_ms((flags,)), mode).asnumpy()
    assert_still_works(mode)


def test_an_op_without_a_meta_kernel_says_what_to_register(mode):
    """A torch.library op with a CPU kernel only (test_custom_extension.py: a compiled one)."""
    lib = torch.library.Library("ms_aten_cpu_only", "DEF")
    lib.define("triple(Tensor x) -> Tensor")
    lib.impl("triple", lambda x: x * 3, "CPU")
    message = (r"op 'ms_aten_cpu_only::triple' has no Meta kernel or fake implementation(.|\n)*"
               r"TORCH_LIBRARY_IMPL\(ms_aten_cpu_only, Meta, m\)(.|\n)*"
               r"torch.library.register_fake\(\"ms_aten_cpu_only::triple\"\)")
    try:
        with pytest.raises(ShapeInferenceError, match=message):
            ms_aten.op("ms_aten_cpu_only::triple")
        with pytest.raises(ms_aten.CaptureError, match=message):
            ms_aten.function(lambda x: torch.ops.ms_aten_cpu_only.triple(x), (X,))
        torch.library.register_fake("ms_aten_cpu_only::triple", lib=lib)(torch.empty_like)
        assert_same(run(ms_aten.op("ms_aten_cpu_only::triple"), to_ms((X,)), mode), X * 3)
    finally:
        lib._destroy()
    assert_still_works(mode)


def test_missing_library_is_an_import_error_with_a_rebuild_hint(tmp_path, monkeypatch):
    from ms_aten.native import library
    monkeypatch.setattr(library, "LIBRARY", tmp_path / "libms_aten.so")
    library.load.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"missing; rebuild it with `bash scripts/setup.sh`"):
            library.load()
        (tmp_path / "libms_aten.so").write_bytes(b"not an ELF file")
        library.load.cache_clear()
        with pytest.raises(ImportError, match=r"cannot be loaded(.|\n)*rebuild"):
            library.load()
    finally:
        monkeypatch.undo()
        library.load.cache_clear()
        library.load()
