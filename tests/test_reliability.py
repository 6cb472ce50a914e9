"""A failure leaves nothing behind: after an exception of any kind inside ms.grad,
ms.value_and_grad or an ms.jit gradient function, in either mode, later gradients (first and
second order) equal torch autograd's; a bad input does not retire an op's out= kernel; the
package exports its error classes."""
from __future__ import annotations

from collections.abc import Callable

import mindspore as ms
import numpy as np
import pytest
import torch

import ms_aten
from ms_aten.native import pyboost
from ms_aten.ops import fast_path

from common import BridgeKernel, set_mode, to_ms, to_torch

g = torch.Generator().manual_seed(3)
X, W, M = (torch.randn(shape, generator=g) for shape in [(3, 4), (3, 4), (4, 2)])
RELU, MM, TANH = ms_aten.op("relu"), ms_aten.op("mm"), ms_aten.op("tanh")
HISTC, INDEX = ms_aten.op("histc", bins=4), ms_aten.op("index.Tensor")
MS_W, MS_M, BAD_INDEX = to_ms(W), to_ms(M), to_ms(torch.tensor([5]))


# ---- failures inside gradients ------------------------------------------------------------

def user_value_error(x):
    y = RELU(x)
    if y.shape[0] > 0:
        raise ValueError("the user's own error")
    return y.sum()


def no_derivative(x):
    return HISTC(x).sum()


def wrong_tensor_count(x):
    return MM(x).sum()


def kernel_error(x):
    return INDEX(x, (BAD_INDEX,)).sum()


# (function that fails, exception, message)
FAILURES = [
    (user_value_error, ValueError, r"the user's own error"),
    # histc's float output has no derivative: its backward refuses.
    (no_derivative, RuntimeError, r"aten::histc \((second-order )?backward\): not differentiable"),
    (wrong_tensor_count, TypeError, r"'aten::mm' takes 2 tensors \(self, mat2\), got 1"),
    (kernel_error, RuntimeError, r"aten::index\.Tensor.*index 5 is out of bounds"),
]


def jit_grad(f: Callable) -> Callable:
    @ms.jit
    def step(x):
        return ms.grad(f)(x)

    return step


WRAPPERS = {
    "grad": ms.grad,
    "value_and_grad": lambda f: (lambda x: ms.value_and_grad(f)(x)[1]),
    "jit": jit_grad,
    "grad_of_grad": lambda f: ms.grad(ms.grad(f)),
}


def loss(x):
    return (MM(RELU(x) * MS_W, MS_M) * 0.5).sum() + TANH(x).sum()


def torch_loss(x: torch.Tensor) -> torch.Tensor:
    return ((x.relu() * W) @ M * 0.5).sum() + x.tanh().sum()


def torch_gradient(order: int) -> torch.Tensor:
    leaf = X.clone().requires_grad_()
    (grad,) = torch.autograd.grad(torch_loss(leaf), leaf, create_graph=order > 1)
    if order > 1:
        (grad,) = torch.autograd.grad(grad.sum(), leaf)
    return grad


def assert_gradients_right(wrapper: Callable) -> None:
    """The same kind of gradient function on a good loss, then plain first and second orders."""
    order = 2 if wrapper is WRAPPERS["grad_of_grad"] else 1
    torch.testing.assert_close(to_torch(wrapper(loss)(to_ms(X))), torch_gradient(order))
    torch.testing.assert_close(to_torch(ms.grad(loss)(to_ms(X))), torch_gradient(1))
    torch.testing.assert_close(to_torch(ms.grad(ms.grad(loss))(to_ms(X))), torch_gradient(2))


@pytest.mark.parametrize("wrapper", list(WRAPPERS.values()), ids=list(WRAPPERS))
@pytest.mark.parametrize("failing, error, message", FAILURES, ids=[f[0].__name__ for f in FAILURES])
def test_a_failure_inside_a_gradient_leaves_later_gradients_right(mode, wrapper, failing, error,
                                                                  message):
    set_mode(mode)
    with pytest.raises(error, match=message):
        # PYNATIVE launches asynchronously: a kernel error surfaces at the sync (asnumpy).
        wrapper(failing)(to_ms(X)).asnumpy()
    assert_gradients_right(wrapper)


def test_the_first_failure_no_longer_breaks_the_next_gradient():
    # The report that started this file: in PYNATIVE, one exception inside ms.grad left
    # MindSpore's GradState set, and the fast path's backward, which read it, then refused
    # every later gradient as "higher-order".
    set_mode("pynative")
    with pytest.raises(TypeError):
        ms.grad(lambda a: MM(a).sum())(to_ms(X))
    got = ms.grad(lambda a: (RELU(a) * MS_W).sum())(to_ms(X))
    torch.testing.assert_close(to_torch(got), (X > 0).float() * W)


# ---- the out= kernel ----------------------------------------------------------------------

def test_a_bad_input_does_not_retire_the_out_kernel():
    # index 5 fails in the out= kernel and in the functional retry alike: the input's fault.
    x = X.numpy()
    with BridgeKernel(ms_aten.op("index_select", dim=0).attrs["ms_aten_spec"]) as kernel:
        assert kernel.uses_out()
        bad = kernel.launch([x, np.array([5]), np.zeros((1, 4), np.float32)])
        assert "aten::index_select: index out of range" in bad
        assert kernel.uses_out()
        out = np.zeros((2, 4), np.float32)
        assert kernel.launch([x, np.array([2, 0]), out]) == ""
        np.testing.assert_array_equal(out, x[[2, 0]])
        assert kernel.uses_out()


def test_an_out_kernel_that_resizes_its_output_is_retired_and_results_stay_right():
    # torch's mse_loss.out resizes its 0-dim output, which MindSpore's buffers cannot take:
    # the functional overload writes the result, and later launches go to it directly.
    x, y = X.numpy(), W.numpy()
    expected = torch.nn.functional.mse_loss(X, W).numpy()
    with BridgeKernel(ms_aten.op("mse_loss").attrs["ms_aten_spec"]) as kernel:
        assert kernel.uses_out()
        for _ in range(2):
            out = np.zeros((), np.float32)
            assert kernel.launch([x, y, out]) == ""
            np.testing.assert_allclose(out, expected, rtol=1e-6)
            assert not kernel.uses_out()


@pytest.mark.skipif(not pyboost.available(), reason="fast-path module not built")
def test_the_op_s_own_kernel_keeps_its_out_path_after_a_bad_call():
    set_mode("pynative")
    op = ms_aten.op("index_select", dim=0)
    with pytest.raises(RuntimeError, match=r"aten::index_select: index out of range"):
        op(to_ms(X), to_ms(torch.tensor([5]))).asnumpy()
    got = op(to_ms(X), to_ms(torch.tensor([2, 0])))
    torch.testing.assert_close(to_torch(got), X[[2, 0]])
    assert fast_path._state(op).forward.uses_out
    mse = ms_aten.op("mse_loss")
    for _ in range(2):
        torch.testing.assert_close(to_torch(mse(to_ms(X), to_ms(W))),
                                   torch.nn.functional.mse_loss(X, W))
    assert not fast_path._state(mse).forward.uses_out


# ---- the package's errors -----------------------------------------------------------------

def test_error_classes_are_exported():
    from ms_aten.native.build import BuildError
    from ms_aten.ops.constants import ConstantError
    from ms_aten.ops.infer import ShapeInferenceError

    namespace: dict = {}
    exec("from ms_aten import *", namespace)  # noqa: S102 (what __all__ promises)
    assert (namespace["BuildError"], namespace["ConstantError"],
            namespace["ShapeInferenceError"]) == (BuildError, ConstantError, ShapeInferenceError)
    # Each is caught by the builtin exception it refines.
    assert issubclass(BuildError, RuntimeError) and issubclass(ShapeInferenceError, RuntimeError)
    assert issubclass(ConstantError, TypeError)
