"""What torch.export refuses runs as an opaque torch call inside the program (capture/opaque.py,
capture/partition.py): each row of issue 55's table captured with one input and called with
inputs that take another branch or loop count, value and every gradient (inputs and
parameters) against torch eager, both modes, each with its OpaqueWarning; refusals by name;
training, second order and checkpoints."""
from __future__ import annotations

import copy
import gc
import re
import warnings
import weakref

import mindspore as ms
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mindspore import nn
from torch import nn as tnn

import ms_aten
from ms_aten.programs.capture import nodes

from common import MODES, set_mode, to_ms, to_torch


class Call(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, *inputs):
        return self.net(*inputs)


# -- the table's rows ----------------------------------------------------------------------------

class Branch(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = tnn.Linear(4, 4)

    def forward(self, h):
        return torch.tanh(self.a(h)) if h.sum() > 0 else h * 2 + self.a.weight.sum()


class Branches(tnn.Module):
    """`if x.sum() > 0` inside a submodule: the submodule is the region, the rest captured."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = tnn.Linear(4, 4, bias=False)  # pre(-x) = -pre(x): x and -x take both branches
        self.part = Branch()

    def forward(self, x):
        return (self.part(self.pre(x)) ** 2).sum()


class Repeat(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = tnn.Linear(4, 4)

    def forward(self, h, n):
        for _ in range(int(n.item())):
            h = torch.tanh(self.layer(h))
        return h


class Loop(tnn.Module):
    """A loop whose count comes from `.item()`."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = tnn.Linear(4, 4)
        self.repeat = Repeat()

    def forward(self, x, n):
        return self.repeat(self.pre(x), n).pow(2).sum()


class Gaussian(tnn.Module):
    """torch.distributions.Normal(...).log_prob with validation, in the root's own forward."""

    def __init__(self) -> None:
        super().__init__()
        self.mu = tnn.Linear(4, 4)
        self.scale = tnn.Linear(4, 4)

    def forward(self, x, y):
        normal = torch.distributions.Normal(self.mu(x), F.softplus(self.scale(x)) + 0.1,
                                            validate_args=True)
        return -normal.log_prob(y).mean()


class Penalty(tnn.Module):
    """A gradient penalty with torch.autograd.grad(create_graph=True) inside forward."""

    def __init__(self) -> None:
        super().__init__()
        self.a = tnn.Linear(4, 8)
        self.b = tnn.Linear(8, 1)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        out = self.b(h)
        (g,) = torch.autograd.grad(out.sum(), h, create_graph=True)
        return out.mean() + ((g.norm(dim=1) - 1) ** 2).mean()


class MarkedPenalty(Penalty):
    """The same penalty, marked as the opaque region by the user."""

    def forward(self, x):
        h = torch.tanh(self.a(x))
        return self.b(h).mean() + self.penalty(h)

    @ms_aten.opaque
    def penalty(self, h):
        (g,) = torch.autograd.grad(self.b(h).sum(), h, create_graph=True)
        return ((g.norm(dim=1) - 1) ** 2).mean()


class CTC(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = tnn.Linear(4, 5)
        self.loss = tnn.CTCLoss()

    def forward(self, x, targets, input_lengths, target_lengths):
        return self.loss(self.proj(x).log_softmax(-1), targets, input_lengths, target_lengths)


class GaussianNLL(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mu = tnn.Linear(4, 3)
        self.var = tnn.Linear(4, 3)
        self.loss = tnn.GaussianNLLLoss()

    def forward(self, x, y):
        return self.loss(self.mu(x), y, F.softplus(self.var(x)) + 0.01)


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


X = _randn(3, 4, seed=1)
_CTC_X = _randn(6, 2, 4, seed=2)
# name: (module, the capture's inputs, inputs that take another branch / count / value,
# the region the warning names, torch.export's words in it)
ROWS = {
    "branch": (Branches, (X,), [(-X,)], "Branches.part (Branch)", "GuardOnDataDependentSymNode"),
    "item_loop": (Loop, (X, torch.tensor(2)), [(X, torch.tensor(3)), (-X, torch.tensor(0))],
                  "Loop.repeat (Repeat)", "GuardOnDataDependentSymNode"),
    "normal_log_prob": (Gaussian, (X, _randn(3, 4, seed=3)), [(-X, _randn(3, 4, seed=4))],
                        "Gaussian (its whole forward)", "GuardOnDataDependentSymNode"),
    "gradient_penalty": (Penalty, (X,), [(X * 3,)], "Penalty (its whole forward)", ""),
    "marked_penalty": (MarkedPenalty, (X,), [(X * 3,)], "MarkedPenalty.penalty",
                       "marked with ms_aten.opaque"),
    "ctc_loss": (CTC, (_CTC_X, torch.tensor([[1, 2, 3], [2, 2, 0]]), torch.tensor([6, 5]),
                       torch.tensor([3, 2])),
                 [(-_CTC_X, torch.tensor([[4, 1, 4], [3, 1, 2]]), torch.tensor([5, 6]),
                   torch.tensor([1, 3]))], "CTC.loss (CTCLoss)", "DynamicOutputShapeException"),
    "gaussian_nll": (GaussianNLL, (X, _randn(3, 3, seed=5)), [(-X, _randn(3, 3, seed=6))],
                     "GaussianNLL.loss (GaussianNLLLoss)", "GuardOnDataDependentSymNode"),
}


@pytest.fixture(scope="module", params=list(ROWS))
def row(request):
    """One capture per row, shared by both modes: the Cell, the torch module, the inputs."""
    make, example, others, region, words = ROWS[request.param]
    torch.manual_seed(0)
    module = make()
    with pytest.warns(ms_aten.OpaqueWarning) as caught:
        cell = ms_aten.module(copy.deepcopy(module), example)
    messages = [str(w.message) for w in caught if issubclass(w.category, ms_aten.OpaqueWarning)]
    assert any(message.startswith(f"ms_aten: {region} runs as an opaque torch call")
               and words in message for message in messages), messages
    assert f"opaque torch call: {region}" in repr(cell)
    return cell, module, [example, *others]


def _torch_value_and_grads(module: tnn.Module, inputs: tuple):
    leaves = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    module.zero_grad()
    value = module(*leaves)
    value.backward()
    return (value.item(), [x.grad.numpy() for x in leaves if x.requires_grad],
            {n: np.zeros(p.shape, np.float32) if p.grad is None else p.grad.numpy()
             for n, p in module.named_parameters()})


def assert_matches_torch(cell: ms_aten.TorchModule, module: tnn.Module, inputs: tuple) -> None:
    """The value, each floating input's gradient and every parameter's, against torch eager."""
    floating = tuple(i for i, x in enumerate(inputs) if x.is_floating_point())
    value, (dx, grads) = ms.value_and_grad(Call(cell), floating, cell.trainable_params())(
        *to_ms(inputs))
    want, want_dx, want_grads = _torch_value_and_grads(module, inputs)
    assert float(value) == pytest.approx(want, rel=1e-5, abs=1e-6)
    dx = dx if isinstance(dx, tuple) else (dx,)
    for got, expected in zip(dx, want_dx, strict=True):
        np.testing.assert_allclose(got.asnumpy(), expected, rtol=1e-5, atol=1e-6)
    for grad, param in zip(grads, cell.trainable_params(), strict=True):
        np.testing.assert_allclose(grad.asnumpy(), want_grads[param.name.removeprefix("net.")],
                                   rtol=1e-5, atol=1e-6, err_msg=param.name)


@pytest.mark.parametrize("mode", list(MODES))
def test_each_row_matches_torch_on_every_branch(row, mode):
    cell, module, calls = row
    set_mode(mode)
    for inputs in calls:
        assert_matches_torch(cell, module, inputs)
        # inference (nothing differentiates) too
        assert float(Call(cell)(*to_ms(inputs))) == pytest.approx(module(*inputs).item(),
                                                                  rel=1e-5, abs=1e-6)


# -- refusals by name -----------------------------------------------------------------------------

class WritesInput(tnn.Module):
    def forward(self, h):
        if h.sum() > 0:
            h.mul_(2)
        return h + 1


class ReturnsANumber(tnn.Module):
    def forward(self, h):
        return h * 2, int(h.sum() > 0)


class Holder(tnn.Module):
    def __init__(self, part: tnn.Module) -> None:
        super().__init__()
        self.pre = tnn.Linear(4, 4)
        self.part = part

    def forward(self, x):
        out = self.part(self.pre(x))
        return out[0] * out[1] if isinstance(out, tuple) else out


def test_a_region_that_writes_its_input_is_refused_by_name():
    with pytest.raises(ms_aten.CaptureError, match=r"opaque region Holder.part \(WritesInput\) "
                                                   r"writes its input in place"):
        ms_aten.module(Holder(WritesInput()), (X,))


def test_a_region_that_returns_a_number_is_refused_by_name():
    with pytest.raises(ms_aten.CaptureError, match=r"opaque region Holder.part "
                                                   r"\(ReturnsANumber\) returns a int"):
        ms_aten.module(Holder(ReturnsANumber()), (X,))


def test_strict_false_is_torch_exports_own_refusal():
    with pytest.raises(ms_aten.CaptureError, match="torch.export cannot capture Branches: "
                                                   "GuardOnDataDependentSymNode"):
        ms_aten.module(Branches(), (X,), strict=False)


# -- training, second order, checkpoints ---------------------------------------------------------

def test_second_order_through_a_region_matches_torch(mode):
    def f(x):
        return torch.sin(x) ** 3 if x.sum() > 0 else torch.cos(x) ** 3

    with pytest.warns(ms_aten.OpaqueWarning, match="its whole forward"):
        function = ms_aten.function(f, (torch.randn(3),))
    set_mode(mode)

    class SumOf(nn.Cell):
        def __init__(self, g):
            super().__init__()
            self.g = g

        def construct(self, x):
            return self.g(x).sum()

    for x in (_randn(3, seed=7).abs(), -_randn(3, seed=7).abs()):
        second = ms.grad(SumOf(ms.grad(SumOf(function))))(to_ms(x))
        xt = x.clone().requires_grad_()
        (first,) = torch.autograd.grad(f(xt).sum(), xt, create_graph=True)
        (expected,) = torch.autograd.grad(first.sum(), xt)
        np.testing.assert_allclose(second.asnumpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def _train_ms(cell, inputs, steps, mode):
    optimizer = nn.SGD(cell.trainable_params(), learning_rate=0.1)
    grad_fn = ms.value_and_grad(Call(cell), None, optimizer.parameters)

    def step(*xs):
        loss, grads = grad_fn(*xs)
        optimizer(grads)
        return loss

    if mode == "graph":
        step = ms.jit(step)
    return [float(step(*to_ms(inputs))) for _ in range(steps)]


def _train_torch(module, inputs, steps):
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = module(*inputs)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("name", ["ctc_loss", "gaussian_nll", "gradient_penalty"])
def test_training_with_mindsporess_optimizer_matches_torch(name, mode):
    make, example, _, _, _ = ROWS[name]
    torch.manual_seed(0)
    module = make()
    set_mode(mode)
    with pytest.warns(ms_aten.OpaqueWarning):
        cell = ms_aten.module(copy.deepcopy(module), example)
    losses = _train_ms(cell, example, 5, mode)
    expected = _train_torch(module, example, 5)
    np.testing.assert_allclose(losses, expected, rtol=1e-4, atol=1e-5)
    for key, value in cell.torch_state_dict().items():
        np.testing.assert_allclose(value.numpy(), module.state_dict()[key].numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=key)


class Noisy(tnn.Module):
    """A region that draws random numbers and writes a buffer (a running count)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = tnn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, h):
        self.calls.add_(1)
        noise = torch.randn_like(h) if h.sum() > 0 else torch.zeros_like(h)
        return self.a(h + noise)


def test_random_draws_and_buffer_writes_are_kept(mode):
    torch.manual_seed(0)
    module = Holder(Noisy())
    with pytest.warns(ms_aten.OpaqueWarning, match=r"Holder.part \(Noisy\)"):
        cell = ms_aten.module(copy.deepcopy(module), (X,))
    assert "ms_aten_opaque::call_random" in cell.program.spec
    set_mode(mode)
    for _ in range(2):
        torch.manual_seed(5)
        got = to_torch(Call(cell)(to_ms(X)))
        torch.manual_seed(5)
        want = module(X)
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cell.torch_state_dict()["part.calls"].numpy(), 2.0)


def test_a_checkpoint_round_trips_a_model_with_a_region(tmp_path, mode):
    torch.manual_seed(0)
    module = GaussianNLL()
    y = _randn(3, 3, seed=5)
    set_mode(mode)
    with pytest.warns(ms_aten.OpaqueWarning):
        cell = ms_aten.module(copy.deepcopy(module), (X, y))
    _train_ms(cell, (X, y), 2, mode)
    path = str(tmp_path / "model.ckpt")
    ms.save_checkpoint(cell, path)
    torch.manual_seed(1)
    with pytest.warns(ms_aten.OpaqueWarning):
        other = ms_aten.module(GaussianNLL(), (X, y))
    ms.load_param_into_net(other, ms.load_checkpoint(path))
    assert float(Call(other)(*to_ms((X, y)))) == pytest.approx(float(Call(cell)(*to_ms((X, y)))),
                                                              rel=1e-6)


def test_a_value_dependent_output_size_that_changes_is_an_error_naming_the_region():
    class Select(tnn.Module):
        def forward(self, h):
            return h[h > 0] if h.sum() > 0 else h.flatten()

    with pytest.warns(ms_aten.OpaqueWarning):
        cell = ms_aten.module(Holder(Select()), (X,))
    set_mode("pynative")
    with pytest.raises(RuntimeError, match=re.escape("opaque region Holder.part (Select) "
                                                     "returned shape")):
        Call(cell)(to_ms(-X * 7))


def test_dynamic_shapes_reach_a_region(mode):
    """The region's output size follows the dynamic batch (taken from a real run's sizes, which
    equal the input's), in both branches."""
    torch.manual_seed(0)
    module = Branches()
    batch = torch.export.Dim("batch", min=2, max=16)
    with pytest.warns(ms_aten.OpaqueWarning, match=r"Branches.part \(Branch\)"):
        cell = ms_aten.module(copy.deepcopy(module), (X,), dynamic_shapes=({0: batch},))
    set_mode(mode)
    for x in (_randn(5, 4, seed=8), -_randn(7, 4, seed=8)):
        assert_matches_torch(cell, module, (x,))


def test_compile_true_compiles_around_a_region_for_inference(tmp_path):
    """An eval-mode capture: AOTInductor compiles the captured parts, and its code calls the
    region's op (its proxy executor: the dispatcher, then the region's Python)."""
    torch.manual_seed(0)
    module = GaussianNLL().eval()
    y = _randn(3, 3, seed=5)
    with pytest.warns(ms_aten.OpaqueWarning, match=r"GaussianNLL.loss \(GaussianNLLLoss\)"):
        cell = ms_aten.module(copy.deepcopy(module), (X, y), compile={"cache_dir": tmp_path})
    assert cell.program.compiled is not None and "ms_aten::compiled" in cell.program.spec
    assert "ms_aten_opaque" not in cell.program.spec
    gc.collect()  # the region's entry lives while the compiled program calls it
    for mode in MODES:
        set_mode(mode)
        for x in (X, -X * 2):
            assert float(Call(cell)(*to_ms((x, y)))) == pytest.approx(module(x, y).item(),
                                                                      rel=1e-5, abs=1e-6)


class Transposed(Branch):
    """Branch's result transposed: a region whose output is not contiguous (the compiled code
    after it was compiled for contiguous inputs)."""

    def forward(self, h):
        return super().forward(h).t()


class Sandwich(tnn.Module):
    """A region between captured layers: weights before it, in it and after it."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = tnn.Linear(4, 4, bias=False)  # pre(-x) = -pre(x): both of part's branches
        self.part = Transposed()
        self.post = tnn.Linear(3, 2)

    def forward(self, x):
        return (self.post(torch.sin(self.part(self.pre(x)))) ** 2).sum()


def _compiled_capture(module: tnn.Module, inputs: tuple, cache) -> ms_aten.TorchModule:
    """A training capture with compile=True, its region named, compiled without a fallback."""
    with pytest.warns(ms_aten.OpaqueWarning) as caught:
        cell = ms_aten.module(copy.deepcopy(module), inputs, compile={"cache_dir": str(cache)})
    assert not [w for w in caught if issubclass(w.category, ms_aten.CompileWarning)]
    return cell


@pytest.fixture(scope="module")
def sandwich(tmp_path_factory):
    """Sandwich compiled for training (its two pieces, forward and backward each) once for
    the file: the Cell, the torch module, the compile cache that later captures load from."""
    cache = tmp_path_factory.mktemp("compiled")
    torch.manual_seed(0)
    module = Sandwich()
    return _compiled_capture(module, (X,), cache), module, cache


def test_compile_true_trains_around_a_region(sandwich, mode):
    """A training capture: the pieces before and after the region compiled (forward and
    backward), the region called between them; the value and every gradient (the input's,
    the weights before, inside and after the region) are torch eager's on both branches."""
    cell, module, _ = sandwich
    compiled = cell.program.compiled
    assert compiled is not None and compiled.training and len(compiled.key.split("+")) == 2
    assert cell.program.spec.count("ms_aten::compiled") == 2
    assert "ms_aten_opaque::call" in cell.program.spec
    assert "opaque torch call: Sandwich.part (Transposed)" in repr(cell)
    set_mode(mode)
    for x in (X, -X):
        assert_matches_torch(cell, module, (x,))
        assert float(Call(cell)(to_ms(x))) == pytest.approx(module(x).item(), rel=1e-5,
                                                            abs=1e-6)


def test_compiled_training_around_a_region_follows_torchs_optimizer(sandwich, mode):
    """5 steps of MindSpore's SGD against torch's on the same model, both branches: the
    losses and every weight after them (a second capture, loaded from the compile cache)."""
    _, module, cache = sandwich
    set_mode(mode)
    for x in (X, -X):
        cell = _compiled_capture(module, (x,), cache)
        assert cell.program.compiled.cached
        expected_module = copy.deepcopy(module)
        losses = _train_ms(cell, (x,), 5, mode)
        expected = _train_torch(expected_module, (x,), 5)
        np.testing.assert_allclose(losses, expected, rtol=1e-4, atol=1e-5)
        for key, value in cell.torch_state_dict().items():
            np.testing.assert_allclose(value.numpy(), expected_module.state_dict()[key].numpy(),
                                       rtol=1e-4, atol=1e-5, err_msg=key)


def test_a_second_order_gradient_through_compiled_pieces_is_refused_by_name(sandwich):
    """Refused by the compiled pieces' backward, which records nothing; the first order goes
    on."""
    cell, module, _ = sandwich
    set_mode("pynative")
    with pytest.raises(RuntimeError, match="second-order gradient through a compiled program"):
        ms.grad(Call(ms.grad(Call(cell))))(to_ms(X))
    assert_matches_torch(cell, module, (X,))


def test_compile_true_with_nothing_around_the_region_runs_interpreted(tmp_path, mode):
    """A region that is the whole forward leaves nothing to compile: the CompileWarning says
    so, and the program runs as the interpreted one, torch's values and gradients."""
    torch.manual_seed(0)
    module = Gaussian()
    inputs = (X, _randn(3, 4, seed=3))
    with pytest.warns(ms_aten.OpaqueWarning), \
            pytest.warns(ms_aten.CompileWarning, match=r"compile=True runs it interpreted: "
                                                       r"Gaussian \(its whole forward\) runs "
                                                       r"as an opaque torch call, and nothing "
                                                       r"captured around it is left to "
                                                       r"compile"):
        cell = ms_aten.module(copy.deepcopy(module), inputs, compile={"cache_dir": tmp_path})
    assert cell.program.compiled is None
    set_mode(mode)
    assert_matches_torch(cell, module, inputs)


class IndexPart(tnn.Module):
    def forward(self, x, i):
        return (x * 2).sum() + i.sum() if x.sum() > 0 else x.sum() - i.sum()


class Indices(tnn.Module):
    """What is captured before the region computes integers only: no gradient flows through
    it, so it is not compiled for training (it stays interpreted)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = tnn.Linear(4, 4)
        self.part = IndexPart()

    def forward(self, x):
        return self.part(x, self.lin(x).argmax(-1))


def test_compile_true_leaves_integers_before_a_region_interpreted(tmp_path, mode):
    torch.manual_seed(0)
    module = Indices()
    with pytest.warns(ms_aten.OpaqueWarning), \
            pytest.warns(ms_aten.CompileWarning, match=r"Indices.part \(IndexPart\) runs as an "
                                                       r"opaque torch call, and no gradient flows "
                                                       r"through what is captured around it"):
        cell = ms_aten.module(copy.deepcopy(module), (X,), compile={"cache_dir": tmp_path})
    assert cell.program.compiled is None
    set_mode(mode)
    for x in (X, -X):
        assert_matches_torch(cell, module, (x,))


# -- the regions' lifetime ------------------------------------------------------------------------

def test_the_regions_a_capture_made_are_freed_with_its_cell():
    """A region's entry (and the torch module it runs) lives as long as its Cell's programs
    (PYNATIVE: a GRAPH-mode call keeps its top Cell in MindSpore's own graph cache)."""
    set_mode("pynative")
    before = nodes.alive()
    module = Branches()
    part = weakref.ref(module.part)
    with pytest.warns(ms_aten.OpaqueWarning, match=r"Branches.part \(Branch\)"):
        cell = ms_aten.module(module, (X,))
    del module
    Call(cell)(to_ms(X))
    ms.value_and_grad(Call(cell), 0, cell.trainable_params())(to_ms(X))
    new = nodes.alive() - before
    assert len(new) == 1  # the program's region; the partition's tries are freed
    gone = weakref.ref(cell)
    del cell
    gc.collect()
    assert gone() is None and part() is None
    assert not new & nodes.alive()


class Negate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return -x

    @staticmethod
    def backward(ctx, g):
        return -g


class RefusedLast(tnn.Module):
    """A Function and a region the capture registers before a second region is refused."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = tnn.Linear(4, 4)
        self.first = Branch()
        self.second = WritesInput()

    def forward(self, x):
        # .abs() + 1: the second region's input sums above 0, so it writes it whatever the
        # random weights (the test's order sets them)
        return self.second(self.first(Negate.apply(self.pre(x))).abs() + 1).sum()


def test_a_capture_that_fails_frees_the_functions_and_regions_it_registered():
    before = nodes.alive()
    with pytest.raises(ms_aten.CaptureError, match=r"opaque region RefusedLast.second "
                                                   r"\(WritesInput\) writes its input"):
        ms_aten.module(RefusedLast(), (X,))
    assert nodes.alive() <= before


def test_a_program_with_a_region_is_not_stored_for_the_next_capture():
    """The capture cache (the test session's) keeps no program with a region, even where the
    user silenced the OpaqueWarning (a capture that warns is not stored): its node's key names
    Python of this process, freed with the Cell that captured it."""
    set_mode("pynative")
    torch.manual_seed(0)
    module = Branches()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ms_aten.OpaqueWarning)
        first = ms_aten.module(copy.deepcopy(module), (X,))
        del first
        gc.collect()
        cell = ms_aten.module(copy.deepcopy(module), (X,))
    assert_matches_torch(cell, module, (X,))


# -- hooks: run as torch's, in regions (capture/hooks.py) -----------------------------------------

class Plain(tnn.Module):
    def __init__(self, hook: bool = False) -> None:
        super().__init__()
        self.a = tnn.Linear(4, 4)
        self.hook = hook

    def forward(self, h):
        z = self.a(h)
        if self.hook:  # the row: a hook that scales the gradient
            z.register_hook(lambda g: g * 3)
        return torch.tanh(z)


class SquareSum(tnn.Module):
    def __init__(self, part: tnn.Module) -> None:
        super().__init__()
        self.pre = tnn.Linear(4, 4)
        self.part = part

    def forward(self, x):
        return (self.part(self.pre(x)) ** 2).sum()


def _scale_inputs(module, grad_input, grad_output):
    return tuple(None if g is None else g * 2 for g in grad_input)


def _tensor_hook(hooks: bool) -> SquareSum:
    return SquareSum(Plain(hook=hooks))


def _module_hooks(hooks: bool) -> SquareSum:
    """Backward hooks that change gradients (before and after the module's own backward) and
    a forward pre-hook that changes its input."""
    module = SquareSum(Plain())
    if hooks:
        module.part.register_full_backward_hook(_scale_inputs)
        module.part.register_full_backward_pre_hook(lambda m, go: (go[0] * -0.5,))
        module.part.register_forward_pre_hook(lambda m, args: (args[0] * 1.5,))
    return module


def _top_module_hooks(hooks: bool) -> SquareSum:
    module = SquareSum(Plain())
    if hooks:
        module.register_full_backward_hook(lambda m, gi, go: (gi[0] * 4,))
        module.register_forward_hook(lambda m, args, out: out * 2)
    return module


# name: (the module, with or without its hooks; the region the warning names, what it says)
HOOKED = {
    "tensor_hook_in_a_submodule": (_tensor_hook, "SquareSum.part (Plain)",
                                   r"Tensor.register_hook\(\) at .*test_opaque.py:\d+"),
    "module_hooks": (_module_hooks, "SquareSum.part (Plain)",
                     r"a module backward hook \(register_full_backward_hook\)"),
    "hooks_on_the_top_module": (_top_module_hooks, "SquareSum (its whole forward)",
                                r"a module backward hook \(register_full_backward_hook\)"),
}


@pytest.fixture(scope="module", params=list(HOOKED))
def hooked(request):
    """One capture per hooked model, shared by both modes; the model without its hooks."""
    make, region, words = HOOKED[request.param]
    torch.manual_seed(0)
    module = make(True)
    torch.manual_seed(0)
    unhooked = make(False)
    with pytest.warns(ms_aten.OpaqueWarning) as caught:
        cell = ms_aten.module(copy.deepcopy(module), (X,))
    messages = [str(w.message) for w in caught if issubclass(w.category, ms_aten.OpaqueWarning)]
    assert any(re.match(f"ms_aten: {re.escape(region)} runs as an opaque torch call.*: {words}",
                        message) for message in messages), messages
    return cell, module, unhooked


@pytest.mark.parametrize("mode", list(MODES))
def test_hooks_run_as_torch_s(hooked, mode):
    """Value, input and parameter gradients as torch eager's with the hooks changing them
    (without them the gradients differ: the hooks ran)."""
    cell, module, unhooked = hooked
    set_mode(mode)
    for x in (X, -X * 2):
        assert_matches_torch(cell, module, (x,))
    dx = ms.grad(Call(cell))(to_ms(X)).asnumpy()
    assert not np.allclose(dx, _torch_value_and_grads(unhooked, (X,))[1][0], rtol=1e-3)


def _top_tensor_hook(x):
    y = torch.sin(x)
    y.register_hook(lambda g: g * -2)
    return (y ** 2).sum()


def test_a_tensor_hook_in_the_top_function_runs_as_torch_s(mode):
    with pytest.warns(ms_aten.OpaqueWarning, match=r"\(its whole forward\) .*Tensor\."
                                                   r"register_hook\(\) at .*test_opaque.py"):
        # (torch refuses the hook on a tensor that does not require grad, in its eager run too)
        function = ms_aten.function(_top_tensor_hook, (X.clone().requires_grad_(),))
    set_mode(mode)
    x = X.clone().requires_grad_()
    _top_tensor_hook(x).backward()
    np.testing.assert_allclose(ms.grad(function)(to_ms(X)).asnumpy(), x.grad.numpy(),
                               rtol=1e-5, atol=1e-6)


def _hooks_its_output(module, args, out):
    out.register_hook(lambda g: g * 7)  # a forward hook that hooks the output (Grad-CAM's)


class HooksItsInput(tnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = tnn.Linear(4, 4)

    def forward(self, x):
        x.register_hook(lambda g: g * -3)
        return (self.a(x) ** 2).sum()


class HooksInAMarkedFunction(HooksItsInput):
    def forward(self, x):
        return (self.part(self.a(x)) ** 2).sum()

    @ms_aten.opaque
    def part(self, h):
        y = torch.sin(h)
        y.register_hook(lambda g: g * 4)
        return y


def _spelling(name: str) -> tnn.Module:
    torch.manual_seed(0)
    if name == "forward_hook_hooks_the_output":
        module = SquareSum(Plain())
        module.part.register_forward_hook(_hooks_its_output)
        return module
    return HooksItsInput() if name == "hook_on_the_forward_s_input" else HooksInAMarkedFunction()


@pytest.mark.parametrize("name", ["forward_hook_hooks_the_output", "hook_on_the_forward_s_input",
                                  "hook_in_a_marked_function", "added_after_the_capture"])
def test_other_spellings_of_hooks_run_as_torch_s(name):
    if name == "added_after_the_capture":  # the next call captures again, with the region
        torch.manual_seed(0)
        module = SquareSum(Plain())
        cell = ms_aten.module(module, (X,))
        hooked = copy.deepcopy(module)
        for m in (module, hooked):
            m.part.register_full_backward_hook(lambda m, gi, go: (gi[0] * 5,))
        module = hooked
        set_mode("pynative")
        with pytest.warns(ms_aten.OpaqueWarning, match=r"SquareSum.part \(Plain\)"):
            Call(cell)(to_ms(X))
    else:
        module = _spelling(name)
        with pytest.warns(ms_aten.OpaqueWarning):
            # (an input that requires grad: torch refuses a hook on one that does not)
            cell = ms_aten.module(copy.deepcopy(module), (X.clone().requires_grad_(),))
    for mode in MODES:
        set_mode(mode)
        assert_matches_torch(cell, module, (X,))


# torch's warning for the exported graph's own `_guards_fn` submodule, which returns None and
# which run_decompositions calls with the global hook installed.
@pytest.mark.filterwarnings("ignore:For backward hooks to be called")
def test_a_global_module_backward_hook_runs_as_torch_s():
    seen: list[str] = []
    torch.manual_seed(0)
    module = SquareSum(Plain())
    handle = tnn.modules.module.register_module_full_backward_hook(
        lambda m, gi, go: seen.append(type(m).__name__))
    try:
        with pytest.warns(ms_aten.OpaqueWarning, match=r"SquareSum \(its whole forward\) .*a "
                                                       r"global module backward hook"):
            cell = ms_aten.module(copy.deepcopy(module), (X,))
        set_mode("pynative")
        assert_matches_torch(cell, module, (X,))
        seen.clear()
        ms.grad(Call(cell))(to_ms(X))
    finally:
        handle.remove()
    assert sorted(seen) == ["Linear", "Linear", "Plain", "SquareSum"]


def test_hooks_that_cannot_run_are_refused_by_name():
    module = SquareSum(Plain())
    module.part.a.weight.register_hook(lambda g: g * 0)
    with pytest.raises(ms_aten.CaptureError, match=r"parameter 'part.a.weight' has a gradient "
                                                   r"hook \(register_hook or register_post_acc"):
        ms_aten.module(module, (X,))
    module = SquareSum(Plain())
    module.part.register_full_backward_hook(_scale_inputs)
    with pytest.raises(ms_aten.CaptureError, match=r"a module backward hook \(register_full_"
                                                   r"backward_hook\) on 'part' runs as an opaque "
                                                   r"torch call, which a strict capture cannot "
                                                   r"make"):
        ms_aten.module(module, (X,), strict=True)
