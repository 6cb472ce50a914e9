"""ms_aten.to_ms / ms_aten.to_torch: every dtype both ways, 0-dim and zero-size tensors, copies
against shared memory, and the error for a dtype MindSpore lacks."""
import numpy as np
import pytest
import torch

import ms_aten
from ms_aten.native import dtypes

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32,
          torch.uint64, torch.complex64, torch.complex128]


def sample(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    values = torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape) * 1.5 - 2
    if dtype.is_complex:
        return torch.complex(values, -values).to(dtype)
    if dtype == torch.bool:
        return values > 0
    if not dtype.is_floating_point:
        values = values.abs() * 3
    return values.to(dtype)


@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4)], ids=["2x3", "0-dim", "zero-size"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("copy", [True, False], ids=["copy", "shared"])
def test_round_trip(dtype, shape, copy):
    t = sample(dtype, shape)
    x = ms_aten.to_ms(t, copy=copy)
    assert tuple(x.shape) == shape
    assert dtypes.to_torch(x.dtype) == dtype
    back = ms_aten.to_torch(x, copy=copy)
    assert back.dtype == dtype
    assert torch.equal(back, t)


def test_copy_does_not_share_and_view_does():
    t = torch.zeros(4)
    copied, shared = ms_aten.to_ms(t), ms_aten.to_ms(t, copy=False)
    t[0] = 7.0
    assert copied.asnumpy()[0] == 0.0
    assert shared.asnumpy()[0] == 7.0
    view = ms_aten.to_torch(shared, copy=False)
    view[1] = 5.0
    assert t[1] == 5.0
    assert ms_aten.to_torch(shared)[1] == 5.0


def test_non_contiguous_and_requires_grad():
    t = torch.randn(3, 4, requires_grad=True)
    np.testing.assert_array_equal(ms_aten.to_ms(t.t()).asnumpy(), t.detach().t().numpy())


def test_dtype_mindspore_lacks_is_named():
    with pytest.raises(TypeError, match="complex32"):
        ms_aten.to_ms(torch.zeros(2, dtype=torch.complex32))
