"""The one dtype table (csrc/boundary/dtype_table.h): the library exports it, Python reads and
checks it."""
import pytest
import torch

from ms_aten.native import dtypes

# What MindSpore 2.10 hands to AOT kernels: the test's own list, so that a shrunk table fails
# here instead of silently shrinking every dtype-parametrized test.
EXPECTED = ["float16", "bfloat16", "float32", "float64", "bool", "int8", "int16", "int32", "int64",
            "uint8", "uint16", "uint32", "uint64", "complex64", "complex128"]


def test_python_reads_the_library_table():
    assert [name for name, _ in dtypes._library_table()] == EXPECTED
    assert [dtypes.spec_name(t) for t in dtypes.TORCH_TO_MS] == EXPECTED


def test_library_entries_name_their_aten_types():
    table = dict(dtypes._library_table())
    assert (table["float16"], table["bool"], table["complex64"]) == ("Half", "Bool", "ComplexFloat")


@pytest.mark.parametrize("entry, problem", [
    (("float16", "Float"), r"the library maps it to ATen's Float, which torch\.float16 is not"),
    (("int4", "Int4"), r"MindSpore 2\.10\.0 has no dtype mindspore\.int4"),
    (("hifloat8", "Byte"), r"torch 2\.13\.0\+cpu has no dtype torch\.hifloat8"),
])
def test_a_disagreeing_entry_is_an_import_error_with_a_rebuild_hint(entry, problem):
    with pytest.raises(ImportError, match=rf"dtype table .* on '{entry[0]}': {problem}; rebuild"):
        dtypes._pair(*entry)


def test_pairs_are_the_same_dtypes_both_ways():
    for ms_dtype, torch_dtype in dtypes.MS_TO_TORCH.items():
        assert dtypes.to_ms(torch_dtype) == ms_dtype and dtypes.to_torch(ms_dtype) is torch_dtype
    assert torch.float8_e4m3fn not in dtypes.TORCH_TO_MS
