"""A custom torch.autograd.Function is a Function however the module's code reaches it (issue 58):
`Cls.apply`, an alias bound at import (DANN's `grad_reverse = GradReverse.apply`, a
straight-through `ste = RoundSTE.apply`), functools.partial, a method of another class, the
setup_context style, a library's namespace, nested Functions, numpy inside forward,
once_differentiable, non-tensor arguments with defaults. Each keeps its own backward (value and
every gradient against torch eager, both modes) or is refused by name. Random draws inside a
Function or a recomputed region reach the backward unchanged; the capture's patches stay in the
capturing thread; the Functions a capture met are freed with its Cell."""
from __future__ import annotations

import copy
import functools
import gc
import sys
import threading
import types
import weakref

import mindspore as ms
import numpy as np
import pytest
import torch
from loss_cell import SumOf
from mindspore import nn
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

import ms_aten
from ms_aten import to_ms
from ms_aten.programs.capture import autograd_functions, nodes

from common import MODES, set_mode


class GradReverse(torch.autograd.Function):
    """Gradient reversal: identity forward, -lam * g backward; lam has a default."""

    @staticmethod
    def forward(ctx, x, lam=1.0):
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.lam * g, None


class RoundSTE(torch.autograd.Function):
    """Straight-through round."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


grad_reverse = GradReverse.apply  # bound at import, as DANN's code does
ste = RoundSTE.apply
reverse_by_half = functools.partial(GradReverse.apply, lam=0.5)


class SetupContextReverse(torch.autograd.Function):
    """The setup_context style (forward without ctx), a default argument."""

    @staticmethod
    def forward(x, lam=2.0):
        return x * 1.0

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.lam = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return -ctx.lam * g, None


# A Function in a library's own namespace (not the test module, not torch.*), reached through
# the library's alias.
_LIBRARY = types.ModuleType("dann_toolkit.layers")
exec(  # noqa: S102  (a module's source, as a library would ship it)
    "import torch\n"
    "class LibraryReverse(torch.autograd.Function):\n"
    "    @staticmethod\n"
    "    def forward(ctx, x, lam):\n"
    "        ctx.lam = lam\n"
    "        return x.clone()\n"
    "    @staticmethod\n"
    "    def backward(ctx, g):\n"
    "        return -ctx.lam * g, None\n"
    "reverse = LibraryReverse.apply\n", _LIBRARY.__dict__)
sys.modules[_LIBRARY.__name__] = _LIBRARY


class Outer(torch.autograd.Function):
    """Nested: its forward applies another Function; its own backward triples the gradient."""

    @staticmethod
    def forward(ctx, x):
        return RoundSTE.apply(x * 2) + grad_reverse(x)

    @staticmethod
    def backward(ctx, g):
        return 3 * g


class NumpyRound(torch.autograd.Function):
    """numpy inside forward; a backward that scales the gradient."""

    @staticmethod
    def forward(ctx, x):
        return torch.from_numpy(np.round(x.detach().cpu().numpy())).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return 0.25 * g


class OnceScaled(torch.autograd.Function):
    """once_differentiable; saved tensors; a backward that scales the gradient."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return 5 * g * w, g * x


class ZeroGrad(torch.autograd.Function):
    """A backward that zeroes the gradient (a stop-gradient written as a Function)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return torch.zeros_like(g)


class Reverser:
    """A method of another class holds the Function; a class attribute holds its alias."""

    grl = GradReverse.apply

    def __init__(self, lam: float) -> None:
        self.lam = lam

    def __call__(self, x):
        return GradReverse.apply(x, self.lam)


REVERSER = Reverser(0.3)


SPELLINGS = {
    "direct": lambda m, h: GradReverse.apply(h, 0.5),
    "alias_at_import": lambda m, h: grad_reverse(h, 0.5),
    "straight_through_alias": lambda m, h: ste(h * 3),
    "partial": lambda m, h: reverse_by_half(h),
    "method_of_another_class": lambda m, h: REVERSER(h),
    "class_attribute_alias": lambda m, h: Reverser.grl(h, 1.5),
    "setup_context": lambda m, h: SetupContextReverse.apply(h),
    "library_namespace": lambda m, h: _LIBRARY.reverse(h, 0.7),
    "nested": lambda m, h: Outer.apply(h),
    "used_twice": lambda m, h: grad_reverse(h, 0.5) * GradReverse.apply(h, -2.0),
    "default_argument": lambda m, h: grad_reverse(h),
    "dann_lambda_attribute": lambda m, h: grad_reverse(h, m.lam),
    "numpy_in_forward": lambda m, h: NumpyRound.apply(h * 3),
    "once_differentiable": lambda m, h: OnceScaled.apply(h, m.b.weight[0]),
    "zero_gradient": lambda m, h: ZeroGrad.apply(h),
}
X = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))


class Net(torch.nn.Module):
    def __init__(self, spelling: str) -> None:
        super().__init__()
        self.spelling = spelling
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.lam = 0.8  # DANN's λ, a plain float the forward passes

    def forward(self, x):
        h = torch.tanh(self.a(x))
        y = SPELLINGS[self.spelling](self, h)
        return (y * self.b(x)).sum() + (h * h).sum()


class Call(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x):
        return self.net(x)


def torch_gradients(module: torch.nn.Module):
    x = X.clone().requires_grad_(True)
    module.zero_grad()
    value = module(x)
    value.backward()
    return value.item(), x.grad.numpy(), {
        n: np.zeros(p.shape, np.float32) if p.grad is None else p.grad.numpy()
        for n, p in module.named_parameters()}


def assert_gradients_match(cell, module: torch.nn.Module) -> None:
    value, (dx, grads) = ms.value_and_grad(Call(cell), 0, cell.trainable_params())(to_ms(X))
    want, want_dx, want_grads = torch_gradients(module)
    assert float(value) == pytest.approx(want, rel=1e-5)
    np.testing.assert_allclose(dx.asnumpy(), want_dx, rtol=1e-5, atol=1e-6)
    for grad, param in zip(grads, cell.trainable_params(), strict=True):
        np.testing.assert_allclose(grad.asnumpy(), want_grads[param.name.split("net.")[-1]],
                                   rtol=1e-5, atol=1e-6, err_msg=param.name)


@pytest.fixture(scope="module")
def captured() -> dict[str, tuple[torch.nn.Module, ms_aten.TorchModule]]:
    """One capture per spelling, which both modes run: the torch module and its Cell."""
    return {}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_every_spelling_keeps_the_function_s_backward(spelling, mode, captured):
    set_mode(mode)
    if spelling not in captured:
        torch.manual_seed(0)
        module = Net(spelling)
        captured[spelling] = module, ms_aten.module(copy.deepcopy(module), (X,))
    module, cell = captured[spelling]
    assert "call ms_aten_autograd::function" in cell.program.spec
    assert_gradients_match(cell, module)


def test_the_forward_s_own_derivative_would_differ():
    """The suite's Functions are told apart from their forward's derivative: torch's gradient
    with the Function inlined differs for each (so a test above that passes is not luck)."""
    for spelling in SPELLINGS:
        torch.manual_seed(0)
        module = Net(spelling)
        _, want_dx, _ = torch_gradients(module)
        with _inlined():
            _, inlined_dx, _ = torch_gradients(module)
        assert not np.allclose(want_dx, inlined_dx, rtol=1e-4, atol=1e-5), spelling


class _inlined:
    """Functions applied as their forward alone, under autograd (what torch.export's
    non-strict trace does to a Function without ms_aten)."""

    def __enter__(self):
        self.code = autograd_functions._APPLY.__code__
        autograd_functions._APPLY.__code__ = _Inline.apply.__code__

    def __exit__(self, *exc):
        autograd_functions._APPLY.__code__ = self.code


class _Inline:
    def apply(cls, *args, **kwargs):  # noqa: N805
        __class__  # noqa: B018
        from torch.autograd.function import _is_setup_context_defined
        if _is_setup_context_defined(cls.setup_context):
            return cls.forward(*args, **kwargs)

        class Ctx:
            def save_for_backward(self, *tensors):
                pass

            def mark_non_differentiable(self, *tensors):
                pass
        return cls.forward(Ctx(), *args, **kwargs)


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_a_strict_capture_refuses_every_spelling_by_name(spelling):
    message = (r"a strict capture inlines a custom torch.autograd.Function's forward and "
               r"loses its backward \(test_function_spellings\.\w+, File ")
    if spelling == "library_namespace":  # exec'd source: no file to find its class in
        message = r"a strict capture inlines a custom torch.autograd.Function's forward and " \
                  r"loses its backward \(File "
    if spelling == "setup_context":  # TorchDynamo fails on it itself (it passes forward a ctx)
        message = r"torch.export cannot capture Net: Unsupported"
    with pytest.raises(ms_aten.CaptureError, match=message):
        ms_aten.module(Net(spelling), (X,), strict=True)



class Checkpointed(torch.nn.Module):
    """torch.utils.checkpoint around a block: its gradient is the block's."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = checkpoint(lambda t: torch.tanh(self.a(t)) * self.b(t), x,
                       use_reentrant=self.reentrant)
        return (h * h).sum()


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpointing_keeps_the_block_s_gradients(reentrant, mode):
    torch.manual_seed(0)
    module = Checkpointed(reentrant)
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (X,))
    assert_gradients_match(cell, module)

class WritesItsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


write_twice = WritesItsInput.apply


@pytest.mark.parametrize("forward", [lambda h: WritesItsInput.apply(h * 1),
                                     lambda h: write_twice(h * 1)], ids=["direct", "alias"])
def test_mark_dirty_is_refused_by_name_in_every_spelling(forward):
    module = Net("direct")
    module.forward = lambda x: forward(module.a(x)).sum()
    with pytest.raises(ms_aten.CaptureError, match=r"Function test_function_spellings."
                                                   r"WritesItsInput writes an input in place"):
        ms_aten.module(module, (X,))



class NumpyPositives(torch.autograd.Function):
    """numpy inside forward, with an output whose size depends on the values."""

    @staticmethod
    def forward(ctx, x):
        values = x.detach().numpy()
        return torch.from_numpy(values[values > 0].copy())

    @staticmethod
    def backward(ctx, g):
        raise AssertionError("never reached")


@pytest.mark.parametrize("mode", list(MODES))
def test_numpy_in_forward_with_value_dependent_sizes_fails_by_name(mode):
    """The capture takes a numpy forward's output shapes from a run on zeros; sizes that depend
    on the values are not what it took, and the call says so rather than run on."""
    function = ms_aten.function(lambda x: NumpyPositives.apply(x), (XR,))
    set_mode(mode)
    with pytest.raises(RuntimeError, match=r"NumpyPositives returned \[\(torch.Size\(\[64\]\).* "
                                           r"when the capture ran its forward on zeros"):
        function(to_ms(XR))

# ---- random draws inside a Function, and in recomputed regions (issue 58, item 3) ----


class RandomMask(torch.autograd.Function):
    """Dropout written as a Function: the forward draws the mask, the backward uses it."""

    @staticmethod
    def forward(ctx, x):
        mask = (torch.rand_like(x) > 0.5).to(x.dtype)
        ctx.save_for_backward(mask)
        return x * mask * 2

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask * 2


def _random_function(x):
    return RandomMask.apply(x)


def _dropout_in_a_checkpoint(x, reentrant: bool):
    return checkpoint(lambda h: torch.nn.functional.dropout(h * 1.0, 0.5, True), x,
                      use_reentrant=reentrant)


RANDOM = {
    "function": _random_function,
    "checkpoint_reentrant": functools.partial(_dropout_in_a_checkpoint, reentrant=True),
    "checkpoint": functools.partial(_dropout_in_a_checkpoint, reentrant=False),
}
XR = torch.randn(64, generator=torch.Generator().manual_seed(2)).abs() + 0.1  # never zero


class _Summed(nn.Cell):
    """The output's sum (what is differentiated) and the output itself (has_aux)."""

    def __init__(self, function):
        super().__init__()
        self.function = function

    def construct(self, x):
        y = self.function(x)
        return y.sum(), y


def assert_gradient_sees_the_forward_s_mask(function, steps: int = 3) -> None:
    """Each step: the gradient is 2 where the output kept x, 0 where it dropped it."""
    step = ms.value_and_grad(_Summed(function), has_aux=True)
    masks = []
    for _ in range(steps):
        (_, y), dx = step(to_ms(XR))
        kept = y.asnumpy() != 0
        np.testing.assert_array_equal(dx.asnumpy(), np.where(kept, 2.0, 0.0))
        masks.append(kept)
    assert 0 < masks[0].sum() < len(XR) and not all((m == masks[0]).all() for m in masks)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("route", list(RANDOM))
def test_random_draws_reach_the_backward_unchanged(route, mode):
    function = ms_aten.function(RANDOM[route], (XR,))
    set_mode(mode)
    assert_gradient_sees_the_forward_s_mask(function)


class RandomSquare(torch.autograd.Function):
    """x² times a mask the forward draws, with a differentiable backward (second order)."""

    @staticmethod
    def forward(ctx, x):
        mask = (torch.rand_like(x) > 0.5).to(x.dtype)
        ctx.save_for_backward(x, mask)
        return x * x * mask

    @staticmethod
    def backward(ctx, g):
        x, mask = ctx.saved_tensors
        return 2 * g * x * mask


@pytest.mark.parametrize("mode", list(MODES))
def test_random_draws_reach_the_second_order_unchanged(mode):
    """The second order recomputes the forward: it replays the forward's draws (torch's
    generator, seeded before the call, gives the mask torch's own run draws)."""
    function = ms_aten.function(lambda x: RandomSquare.apply(x), (XR,))
    set_mode(mode)
    second = ms.grad(SumOf(ms.grad(SumOf(function))))
    for seed in (3, 4):
        torch.manual_seed(seed)
        got = second(to_ms(XR)).asnumpy()
        torch.manual_seed(seed)
        mask = (torch.rand_like(XR) > 0.5).to(XR.dtype)
        np.testing.assert_array_equal(got, 2 * mask.numpy())


def test_random_function_under_compile(tmp_path):
    function = ms_aten.function(_random_function, (XR,),
                                compile={"cache_dir": tmp_path, "training": True})
    set_mode("pynative")
    assert_gradient_sees_the_forward_s_mask(function)


# ---- the second look (issue 58, item 7) ----


def _keyed(source: str) -> type[torch.autograd.Function]:
    """A Function class `keyed_lib.Keyed` made from source: the same name each time."""
    namespace = {"__name__": "keyed_lib"}
    exec("import torch\n" + source, namespace)  # noqa: S102
    return namespace["Keyed"]


_KEYED = """
class Keyed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return {}
"""


def _made_with(scale: float) -> type[torch.autograd.Function]:
    class Keyed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * scale
    return Keyed


def _identities(cls: type[torch.autograd.Function]) -> list[str]:
    from ms_aten.programs.capture.export import FunctionModule, export
    exported, _ = export(FunctionModule(lambda x: cls.apply(x)), (torch.randn(3),), "keyed")
    return autograd_functions.identities(exported.graph_module)


@pytest.mark.parametrize("before, after", [
    (_KEYED.format("g * torch.sigmoid(x)"), _KEYED.format("g * torch.tanh(x)")),
    ("def helper(t):\n    return torch.sigmoid(t)\n" + _KEYED.format("g * helper(x)"),
     "def helper(t):\n    return torch.tanh(t)\n" + _KEYED.format("g * helper(x)")),
    ("SCALE = 2.0\n" + _KEYED.format("g * SCALE"), "SCALE = 3.0\n" + _KEYED.format("g * SCALE")),
    (_KEYED.format("(lambda t: g * torch.sigmoid(t))(x)"),
     _KEYED.format("(lambda t: g * torch.tanh(t))(x)")),
], ids=["names_it_calls", "a_helper_it_calls", "a_global_it_reads", "nested_code"])
def test_a_compile_cache_key_covers_what_a_function_s_code_reaches(before, after):
    assert _identities(_keyed(before)) == _identities(_keyed(before))
    assert _identities(_keyed(before)) != _identities(_keyed(after))


def test_a_compile_cache_key_covers_a_function_s_closure():
    assert _identities(_made_with(2.0)) == _identities(_made_with(2.0))
    assert _identities(_made_with(2.0)) != _identities(_made_with(3.0))


class _Table:
    scale = 2.0


TABLE = _Table()


class ReadsAnObject(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * TABLE.scale


def test_compile_falls_back_for_a_function_it_cannot_key(tmp_path):
    from ms_aten.programs.compile.compiled import CompileWarning
    with pytest.warns(CompileWarning, match=r"ReadsAnObject: its code reads a _Table, which the "
                                            r"cache cannot key"):
        function = ms_aten.function(lambda x: ReadsAnObject.apply(x), (XR,),
                                    compile={"cache_dir": tmp_path, "training": True})
    assert function.program.compiled is None
    assert "call ms_aten_autograd::function" in function.program.spec
    set_mode("pynative")
    np.testing.assert_array_equal(ms.grad(SumOf(function))(to_ms(XR)).asnumpy(),
                                  np.full(XR.shape, 2.0, np.float32))


class MatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, g):  # outside autocast, as torch runs it: g is bfloat16
        x, w = ctx.saved_tensors
        return 3 * g @ w.to(g.dtype).t(), x.to(g.dtype).t() @ g


class Autocast(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = MatMul.apply(x, self.w)
        assert y.dtype == torch.bfloat16
        return (y.float() * x).sum()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_function_under_autocast_runs_under_it(mode):
    torch.manual_seed(0)
    module = Autocast()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (X,))
    assert_gradients_match(cell, module)



class UnderAmp(Autocast):
    """The same Function, the autocast MindSpore's amp (to_float) puts around the program."""

    def forward(self, x):
        return (MatMul.apply(x, self.w).float() * x).sum()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_function_under_mindspore_s_amp_runs_under_its_autocast(mode):
    torch.manual_seed(0)
    module = UnderAmp()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (X,))
    cell.to_float(ms.bfloat16)
    value, (dx, (dw,)) = ms.value_and_grad(Call(cell), 0, cell.trainable_params())(to_ms(X))
    x = X.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = module(x)
    want.backward()
    assert float(value) == pytest.approx(want.item(), rel=1e-5)
    np.testing.assert_allclose(dx.asnumpy(), x.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw.asnumpy(), module.w.grad.numpy(), rtol=1e-5, atol=1e-6)

@torch.inference_mode()  # applied at import
def _teacher(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return layer(x) * 2


class InferenceModes(torch.nn.Module):
    def __init__(self, construct: str) -> None:
        super().__init__()
        self.construct = construct
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if self.construct == "inference_mode_false_inside_no_grad":
            with torch.no_grad():
                t = self.b(x)
                with torch.inference_mode(False):
                    u = self.b(h)
            return (h * t).sum() + (u * u).sum()
        t = _teacher(self.b, x)  # an inference tensor: added, never saved for backward
        return (h + t).sum() + (h * h).sum()


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("construct", ["inference_mode_false_inside_no_grad",
                                       "decorator_at_import"])
def test_inference_mode_keeps_torch_s_gradients(construct, mode, strict):
    torch.manual_seed(0)
    module = InferenceModes(construct)
    set_mode(mode)
    if strict and construct == "decorator_at_import":  # TorchDynamo refuses the decorator
        with pytest.raises(ms_aten.CaptureError, match=r"cannot capture InferenceModes: "
                                                       r"Unsupported: Unsupported function call"):
            ms_aten.module(copy.deepcopy(module), (X,), strict=strict)
        return
    cell = ms_aten.module(copy.deepcopy(module), (X,), strict=strict)
    assert_gradients_match(cell, module)


@pytest.mark.parametrize("mode", list(MODES))
def test_the_functions_a_capture_met_are_freed_with_its_cell(mode):
    set_mode(mode)
    before = nodes.alive()
    cell = ms_aten.module(Net("used_twice"), (X,))
    Call(cell)(to_ms(X))
    if mode == "pynative":  # GRAPH mode's grad keeps its Cell (MindSpore's own cache)
        ms.value_and_grad(Call(cell), 0, cell.trainable_params())(to_ms(X))
    new = nodes.alive() - before
    assert len(new) == 2
    gone = weakref.ref(cell)
    del cell
    gc.collect()
    assert gone() is None and not new & nodes.alive()


def test_another_thread_keeps_torch_s_hooks_and_functions_during_a_capture():
    """The capture's patches act in the capturing thread alone."""
    seen = {}

    def elsewhere():
        x = torch.ones(2, requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: g * 3)  # an opaque region in the capturing thread
        grad_reverse(y, 1.0).sum().backward()
        with torch.no_grad(), torch.inference_mode(False):
            seen["grad_enabled"] = torch.is_grad_enabled()
        with torch.inference_mode():
            seen["inference"] = torch.ones(1).is_inference()
        seen["grad"] = x.grad

    class Spawns(Net):
        def forward(self, x):
            thread = threading.Thread(target=elsewhere)
            thread.start()
            thread.join()
            return super().forward(x)

    torch.manual_seed(0)
    module = Spawns("alias_at_import")
    cell = ms_aten.module(copy.deepcopy(module), (X,))
    torch.testing.assert_close(seen["grad"], torch.full((2,), -6.0))
    assert seen["grad_enabled"] and seen["inference"]
    set_mode("pynative")
    assert_gradients_match(cell, module)
