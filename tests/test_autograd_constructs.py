"""torch's autograd constructs inside a captured forward (grad-mode regions, custom
autograd.Functions, hooks): torch autograd's gradients, or a refusal that names the construct;
never a gradient that silently differs. Both modes, against torch."""
from __future__ import annotations

import copy

import mindspore as ms
import models
import numpy as np
import pytest
import torch
from loss_cell import SumOf
from mindspore import nn
from training import train_ms, train_torch

import ms_aten
from ms_aten import to_ms, to_torch

from common import MODES, set_mode


class GradReverse(torch.autograd.Function):
    """Domain adaptation's gradient reversal: identity forward, -scale * g backward."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.scale * g, None


class RoundSTE(torch.autograd.Function):
    """A straight-through estimator: round forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


class ScaledPair(torch.autograd.Function):
    """Two outputs, one non-differentiable; saved tensors; needs_input_grad; a differentiable
    backward (second order through it) that halves x's true gradient, so that the forward's own
    derivative would give other gradients."""

    @staticmethod
    def forward(ctx, x, w, power: int):
        ctx.save_for_backward(x, w)
        ctx.power = power
        index = torch.argmax(x, dim=-1)
        ctx.mark_non_differentiable(index)
        return x ** power * w, index

    @staticmethod
    def backward(ctx, g, _g_index):
        x, w = ctx.saved_tensors
        gx = 0.5 * g * ctx.power * x ** (ctx.power - 1) * w if ctx.needs_input_grad[0] else None
        gw = g * x ** ctx.power if ctx.needs_input_grad[1] else None
        return gx, gw, None


class Net(torch.nn.Module):
    """Every construct of issue 40's table that keeps torch's gradients, in one forward."""

    def __init__(self, construct: str) -> None:
        super().__init__()
        self.construct = construct
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)  # used only where no gradient flows, in some constructs

    def forward(self, x):
        h = torch.tanh(self.a(x))
        c = self.construct
        if c == "no_grad":  # a teacher's target
            with torch.no_grad():
                target = self.b(x)
            return ((h - target) ** 2).sum()
        if c == "set_grad_enabled":
            with torch.set_grad_enabled(False):
                target = self.b(h)
            return (h * target).sum()
        if c == "enable_grad_inside_no_grad":
            with torch.no_grad():
                t = self.b(x)
                with torch.enable_grad():
                    u = self.b(h)
            return (h * t).sum() + (u * u).sum()
        if c == "inference_mode":
            with torch.inference_mode():
                t = self.b(x) * 2
            return (h + t).sum() + (h * h).sum()  # torch refuses to save an inference tensor
        if c == "grad_reverse":
            return (GradReverse.apply(h, 0.5) * h.detach() + h).sum()
        if c == "straight_through":
            return (RoundSTE.apply(h * 3) * self.b(x)).sum()
        if c == "function_in_no_grad":
            with torch.no_grad():
                t = RoundSTE.apply(self.b(x) * 3)
            return (GradReverse.apply(h, 2.0) * t).sum()
        if c == "teacher_and_reversal":  # compile=True's case: a region and a Function
            with torch.no_grad():
                target = self.b(x)
            return ((GradReverse.apply(h, 0.5) - target) ** 2).sum()
        if c == "several_outputs":
            y, index = ScaledPair.apply(h, self.b.weight[0], 3)
            return (y * (index + 1).unsqueeze(-1)).sum()
        raise AssertionError(c)


CONSTRUCTS = ["no_grad", "set_grad_enabled", "enable_grad_inside_no_grad", "inference_mode",
              "grad_reverse", "straight_through", "function_in_no_grad", "several_outputs"]
X = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))


class Call(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x):
        return self.net(x)


def torch_gradients(module: torch.nn.Module) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
    x = X.clone().requires_grad_(True)
    module.zero_grad()
    value = module(x)
    value.backward()
    return value.item(), x.grad.numpy(), {
        n: np.zeros(p.shape, np.float32) if p.grad is None else p.grad.numpy()
        for n, p in module.named_parameters()}


def assert_gradients_match(cell: ms_aten.TorchModule, module: torch.nn.Module) -> None:
    """The value, the input's gradient and every parameter's, by name, against torch's."""
    value, (dx, grads) = ms.value_and_grad(Call(cell), 0, cell.trainable_params())(to_ms(X))
    want, want_dx, want_grads = torch_gradients(module)
    assert float(value) == pytest.approx(want, rel=1e-5)
    np.testing.assert_allclose(dx.asnumpy(), want_dx, rtol=1e-5, atol=1e-6)
    for grad, param in zip(grads, cell.trainable_params(), strict=True):
        np.testing.assert_allclose(grad.asnumpy(), want_grads[param.name.split("net.")[-1]],
                                   rtol=1e-5, atol=1e-6, err_msg=param.name)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("construct", CONSTRUCTS)
def test_value_and_every_gradient_match_torch(construct, mode):
    torch.manual_seed(0)
    module = Net(construct)
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (X,))
    assert_gradients_match(cell, module)


def test_function_nodes_run_the_function_without_autograd_too():
    """Inference (nothing differentiates): the Function's forward, one node per application."""
    torch.manual_seed(0)
    module = Net("function_in_no_grad")
    set_mode("pynative")
    cell = ms_aten.module(copy.deepcopy(module), (X,))
    assert cell.program.spec.count("call ms_aten_autograd::function") == 2
    assert float(cell(to_ms(X))) == pytest.approx(module(X).item(), rel=1e-5)


W = torch.tensor([0.5, -1.0, 2.0])


def _through_a_function(x):
    return ScaledPair.apply(x, W, 3)[0]


def _through_a_no_grad_region(x):
    with torch.no_grad():
        scale = x.exp()
    return x ** 3 * scale


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("f", [_through_a_function, _through_a_no_grad_region],
                         ids=["function_with_a_differentiable_backward", "no_grad_region"])
def test_second_order_matches_torch(f, mode):
    function = ms_aten.function(f, (torch.randn(3),))
    x = to_ms(torch.randn(3))
    set_mode(mode)
    second = ms.grad(SumOf(ms.grad(SumOf(function))))(x)
    xt = to_torch(x).requires_grad_()
    first = torch.autograd.grad(f(xt).sum(), xt, create_graph=True)[0]
    expected = torch.autograd.grad(first.sum(), xt)[0]
    np.testing.assert_allclose(second.asnumpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


class Captures(torch.nn.Module):
    def __init__(self, forward) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.fn = forward

    def forward(self, x):
        return self.fn(self, x)


class ReadsAWeight(torch.autograd.Function):
    weight = torch.nn.Parameter(torch.ones(2))

    @staticmethod
    def forward(ctx, x):
        return x * ReadsAWeight.weight

    @staticmethod
    def backward(ctx, g):
        return g


class TakesAModule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, module):
        return module(x)

    @staticmethod
    def backward(ctx, g):
        return g, None


class WritesItsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


def _tensor_hook(self, x):
    h = self.lin(x)
    h.register_hook(lambda g: g * 3)
    return h.sum()


def _post_accumulate_grad_hook(self, x):
    self.lin.weight.register_post_accumulate_grad_hook(lambda p: None)
    return self.lin(x).sum()


@pytest.mark.parametrize("forward, message", [
    (_post_accumulate_grad_hook,
     r"Tensor.register_post_accumulate_grad_hook\(\) at .*test_autograd_constructs.py:\d+ "
     r"would never run: a program's weights are new tensors at every call"),
    (lambda self, x: ReadsAWeight.apply(self.lin(x)).sum(),
     r"Function test_autograd_constructs.ReadsAWeight reads a tensor \(shape \[2\]\) that is "
     r"not among its arguments"),
    (lambda self, x: TakesAModule.apply(x, self.lin).sum(),
     r"TakesAModule takes the module Linear as an argument"),
    (lambda self, x: WritesItsInput.apply(self.lin(x)).sum(),
     r"WritesItsInput writes an input in place \(mark_dirty\)"),
], ids=["post_accumulate_grad_hook", "closure_over_a_weight", "module_argument", "mark_dirty"])
def test_what_a_capture_cannot_keep_is_refused_by_name(forward, message):
    module = Captures(forward)
    with pytest.raises(ms_aten.CaptureError, match=message):
        ms_aten.module(module, (torch.randn(3, 2),))
    # Nothing stays patched: torch's own hooks and Functions work after the refusal.
    x = torch.randn(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g * 3)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((2,), 6.0))
    assert GradReverse.apply(x, 1.0).requires_grad


def test_a_parameter_s_gradient_hook_is_refused_by_name():
    """A module's backward hooks and tensor hooks run as torch's (test_opaque.py's hooks)."""
    module = Captures(lambda self, x: self.lin(x).sum())
    module.lin.weight.register_hook(lambda g: g * 0)
    with pytest.raises(ms_aten.CaptureError, match=r"parameter 'lin.weight' has a gradient hook "
                                                   r"\(register_hook or register_post_accumulate"
                                                   r"_grad_hook\), which would never run"):
        ms_aten.module(module, (torch.randn(3, 2),))


def test_a_region_and_a_function_under_compile_keep_torch_s_gradients(tmp_path):
    """compile=True: AOTAutograd traces the region's detaches, the Function's forward and its
    own backward."""
    torch.manual_seed(0)
    module = Net("teacher_and_reversal")
    set_mode("pynative")
    cell = ms_aten.module(copy.deepcopy(module), (X,),
                          compile={"cache_dir": tmp_path, "training": True})
    assert cell.program.compiled is not None
    assert_gradients_match(cell, module)


class QuantizedGELU(torch.nn.Module):
    """A straight-through quantizer after GPT-2's MLP activation (quantization-aware training)."""

    def __init__(self, act: torch.nn.Module) -> None:
        super().__init__()
        self.act = act

    def forward(self, x):
        return RoundSTE.apply(self.act(x) * 4) / 4


@pytest.mark.parametrize("mode", list(MODES))
def test_gpt2_with_a_straight_through_quantizer_trains_like_torch(mode):
    torch.manual_seed(0)
    case = models.gpt2(dropout=0.0)
    for block in case.module.transformer.h:
        block.mlp.act = QuantizedGELU(block.mlp.act)
    ms_losses, cell, _ = train_ms(case, mode, lambda p: ms_aten.optim.Adam(p, lr=1e-3), steps=10)
    assert cell.program.spec.count("call ms_aten_autograd::function") == 2
    torch_losses, _, _ = train_torch(case, lambda p: torch.optim.Adam(p, lr=1e-3), steps=10)
    np.testing.assert_allclose(ms_losses, torch_losses, rtol=1e-4)
    assert torch_losses[-1] < torch_losses[0]


@pytest.mark.parametrize("construct", ["no_grad", "inference_mode", "enable_grad_inside_no_grad"])
def test_a_strict_capture_keeps_grad_mode_regions(construct):
    """TorchDynamo drops inference_mode silently; it is traced as no_grad there too."""
    torch.manual_seed(0)
    module = Net(construct)
    set_mode("pynative")
    cell = ms_aten.module(copy.deepcopy(module), (X,), strict=True)
    _, want_dx, _ = torch_gradients(module)
    np.testing.assert_allclose(ms.grad(cell)(to_ms(X)).asnumpy(), want_dx, rtol=1e-5, atol=1e-6)


def test_a_strict_capture_refuses_functions_and_hooks_by_name():
    with pytest.raises(ms_aten.CaptureError, match=r"a strict capture inlines a custom "
                       r"torch.autograd.Function's forward and loses its backward \(test_autograd_"
                       r"constructs.GradReverse, File "
                       r"\".*test_autograd_constructs.py\", line \d+, in forward\); capture "
                       r"with strict=False"):
        ms_aten.module(Net("grad_reverse"), (X,), strict=True)
    with pytest.raises(ms_aten.CaptureError, match=r"Tensor.register_hook\(\) .* runs only in "
                                                   r"torch's autograd, as an opaque torch call, "
                                                   r"which a strict capture cannot make"):
        ms_aten.module(Captures(_tensor_hook), (torch.randn(3, 2),), strict=True)
