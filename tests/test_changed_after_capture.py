"""The torch module changed after ms_aten.module captured it (issue 58, item 5): each change is
seen by the next call, in both modes, or refused by name. Values and every gradient against
torch eager after the change; GRAPH mode through one graph compiled before the changes (a loss
Cell under value_and_grad), so the check at each launch is what sees them."""
from __future__ import annotations

from collections import OrderedDict

import mindspore as ms
import pytest
import torch
import transformers
from mindspore import nn

import ms_aten
from ms_aten import to_ms, to_torch
from ms_aten.programs.capture.guards import Guards
from ms_aten.programs.runtime.changes import TorchModuleChanged

from common import set_mode

X = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
WEIGHTS = torch.arange(3.0) + 1


class GradReverse(torch.autograd.Function):
    """DANN's gradient reversal: identity forward, -λ times the gradient backward."""

    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.lambd * grad, None


class Net(torch.nn.Module):
    """A Linear, an activation, a Dropout, a scale, a gradient reversal of weight λ and a
    config flag: every kind of value a forward reads."""

    def __init__(self, function: bool = True):
        super().__init__()
        self.function = function
        self.fc = torch.nn.Linear(4, 3)
        self.act = torch.nn.GELU()
        self.drop = torch.nn.Dropout(0.0)
        self.scale = 1.0
        self.lambd = 1.0
        self.config = transformers.PretrainedConfig(use_gate=False)

    def forward(self, x):
        h = self.drop(self.act(self.fc(x))) * self.scale
        if self.config.use_gate:
            h = h * torch.sigmoid(h)
        if not self.function:
            return h
        return GradReverse.apply(h, self.lambd) + 0.5 * h  # apply called directly (item 1)


class Weighted(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.weights = ms.Tensor(WEIGHTS.numpy())

    def construct(self, x):
        return (self.net(x) * self.weights).sum()


class Case:
    """A model, its Cell and one gradient function, made before any change (in GRAPH mode one
    graph, compiled once)."""

    def __init__(self, mode: str, train: bool = False, function: bool = True,
                 model: type[torch.nn.Module] | None = None):
        set_mode(mode)
        torch.manual_seed(0)
        self.model = (Net(function) if model is None else model()).train(train)
        self.cell = ms_aten.module(self.model, (X,))
        self.grad = ms.value_and_grad(Weighted(self.cell), 0, self.cell.trainable_params())

    def check(self) -> None:
        """cell(x) from Python and the loss's value and gradients (input and every weight),
        against torch eager on the torch module as it is now."""
        x = X.clone().requires_grad_(True)
        self.model.zero_grad()
        value = (self.model(x) * WEIGHTS).sum()
        value.backward()
        drop = getattr(self.model, "drop", None)
        assert (drop is not None and drop.p == 1.0) or x.grad.abs().min() > 0  # not vacuous
        torch.testing.assert_close(to_torch(self.cell(to_ms(X))), self.model(X).detach(),
                                   rtol=1e-5, atol=1e-6)
        got, (grad_x, grad_weights) = self.grad(to_ms(X))
        assert abs(float(got) - value.item()) < 1e-5, (float(got), value.item())
        torch.testing.assert_close(to_torch(grad_x), x.grad, rtol=1e-5, atol=1e-6)
        parameters = dict(self.model.named_parameters())
        for parameter, grad in zip(self.cell.trainable_params(), grad_weights, strict=True):
            expected = parameters[parameter.name.removeprefix("net.")].grad
            torch.testing.assert_close(to_torch(grad), expected, rtol=1e-5, atol=1e-6,
                                       msg=parameter.name)


MODES = ["graph", "pynative"]


@pytest.mark.parametrize("mode", MODES)
def test_python_values_read_in_forward(mode):
    case = Case(mode)
    case.check()
    case.model.scale = 2.5  # a float attribute
    case.check()
    for lambd in (0.1, 0.4, 0.7, 1.0):  # DANN's schedule: λ changed every step
        case.model.lambd = lambd
        case.check()
    case.model.config.use_gate = True  # a HuggingFace config flag
    case.check()
    assert [c.path for changes in case.cell.recaptures for c in changes] == [
        "scale", "lambd", "lambd", "lambd", "lambd", "config.use_gate"]


@pytest.mark.parametrize("mode", MODES)
def test_dropout_schedule(mode):
    case = Case(mode, train=True)
    case.model.drop.p = 0.5
    case.cell(to_ms(X))  # random: not comparable, but the program draws from here on
    case.model.drop.p = 1.0  # everything dropped: zeros, and zero gradients
    case.check()
    assert not to_torch(case.cell(to_ms(X))).any()


@pytest.mark.parametrize("mode", MODES)
def test_new_outputs(mode):
    """p from 0 to 1 makes the program random: a new output (the RNG state), so a new
    primitive. A call from Python runs it; a graph compiled before the change refuses."""
    case = Case(mode, train=True)
    case.check()
    case.model.drop.p = 1.0
    if mode == "pynative":
        case.check()
        return
    torch.testing.assert_close(to_torch(case.cell(to_ms(X))), torch.zeros(2, 3))
    with pytest.raises(TorchModuleChanged, match=r"after attribute 'drop\.p' was 0\.0, now 1\.0"
                                                 r".*compile that graph again"):
        case.grad(to_ms(X))
    case.grad = ms.value_and_grad(Weighted(case.cell), 0, case.cell.trainable_params())
    case.check()


@pytest.mark.parametrize("mode", MODES)
def test_weights_written_in_torch(mode):
    case = Case(mode)
    state = {k: torch.randn_like(v) for k, v in case.model.state_dict().items()}
    case.model.load_state_dict(state)  # build, wrap, then load pretrained weights
    case.check()
    with torch.no_grad():
        case.model.fc.weight.mul_(2)  # an in-place edit
    case.check()
    case.model.fc.bias = torch.nn.Parameter(torch.randn(3))  # a Parameter object replaced
    case.check()
    assert case.cell.recaptures == []  # weights are copied, nothing captured again


@pytest.mark.parametrize("mode", MODES)
def test_submodule_replaced(mode):
    case = Case(mode)
    case.model.act = torch.nn.Tanh()
    case.check()
    case.model.fc = torch.nn.Linear(4, 3)  # new weights under the same names
    case.check()


@pytest.mark.parametrize("mode", MODES)
def test_unread_value_changes_nothing(mode):
    case = Case(mode, function=False)  # each capture of a Function is a program of its own
    primitive, program = case.cell.primitive, case.cell.program
    case.model.note = "not read by forward"
    case.model.fc.comment = 3
    case.check()
    assert case.cell.primitive is primitive and case.cell.program is program


@pytest.mark.parametrize("mode", MODES)
def test_training_state_kept(mode):
    """The Cell owns its weights: a recapture keeps the Parameters MindSpore trained, and the
    torch module keeps its own until torch_state_dict() goes back."""
    case = Case(mode)
    parameters = list(case.cell.trainable_params())
    optimizer = nn.SGD(parameters, learning_rate=0.1)
    _, (_, grads) = case.grad(to_ms(X))
    optimizer(grads)
    trained = {p.name.removeprefix("net."): to_torch(p.value()) for p in parameters}
    assert not torch.equal(trained["fc.weight"], case.model.fc.weight.detach())
    case.model.scale = 3.0
    case.cell(to_ms(X))
    assert list(case.cell.trainable_params()) == parameters
    for p in parameters:
        torch.testing.assert_close(to_torch(p.value()), trained[p.name.removeprefix("net.")])
    case.model.load_state_dict(case.cell.torch_state_dict())  # the trained weights go back
    case.check()


@pytest.mark.parametrize("mode", MODES)
def test_changes_refused_by_name(mode):
    case = Case(mode)
    case.model.fc.weight = torch.nn.Parameter(torch.randn(3, 5))
    with pytest.raises(TorchModuleChanged, match=r"weight 'fc\.weight' is now float32\[3, 5\]"):
        case.cell(to_ms(X))
    case.model.fc.weight = torch.nn.Parameter(torch.randn(3, 4), requires_grad=False)
    with pytest.raises(TorchModuleChanged, match=r"requires_grad of the torch module's weight "
                                                 r"'fc\.weight'"):
        case.cell(to_ms(X))
    case.model.fc = torch.nn.Linear(4, 3, bias=False)
    with pytest.raises(TorchModuleChanged, match=r"removed: \['fc\.bias'\]"):
        case.cell(to_ms(X))


@pytest.mark.parametrize("mode", MODES)
def test_dynamic_capture_and_other_shapes(mode):
    """A change reaches every size a dynamic capture serves, and every static shape captured
    again for other inputs."""
    set_mode(mode)
    torch.manual_seed(0)
    model = Net(function=False)
    dynamic = ms_aten.module(model, (X,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    static = ms_aten.module(model, (X,))
    wide = torch.randn(5, 4)
    for cell in (dynamic, static):
        cell(to_ms(wide))  # the static Cell captures this shape too
    model.scale = -2.0
    for cell in (dynamic, static):
        for x in (X, wide):
            torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(),
                                       rtol=1e-5, atol=1e-6)


def test_graph_of_another_mode_refuses():
    """A graph compiled in train mode holds the train-mode primitive; a change made while the
    Cell is in eval mode is captured for eval mode only, so that graph refuses by name."""
    case = Case("graph", train=True)
    case.check()
    case.cell.set_train(False)
    case.model.eval()
    case.model.scale = 2.0
    torch.testing.assert_close(to_torch(case.cell(to_ms(X))), case.model(X).detach())
    case.cell.set_train(True)
    case.model.train()
    with pytest.raises(TorchModuleChanged, match=r"another train/eval mode"):
        case.grad(to_ms(X))
    case.grad = ms.value_and_grad(Weighted(case.cell), 0, case.cell.trainable_params())
    case.check()


class Held(torch.nn.Module):
    """What the per-call check compares by other means than identity (capture/guards.py,
    _Snapshot): a list read in place, a one-element weight, a config and a hook table that
    may be replaced by equal ones."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.factors = [1.5, -0.5]
        self.alpha = torch.nn.Parameter(torch.tensor(0.75))
        self.config = transformers.PretrainedConfig(scale=1.0)

    def forward(self, x):
        h = self.fc(x) * self.factors[0] + self.factors[1]
        return h * self.alpha * self.config.scale


@pytest.mark.parametrize("mode", MODES)
def test_equal_replacements_then_changes(mode):
    """A hook table replaced by an equal one changes nothing; a config replaced by an equal one
    is captured again (its `==` compares fields by value, blind to `1` for `1.0`); a later
    change to either is seen, and after each the quick check passes again."""
    case = Case(mode, model=Held)
    case.check()
    case.model.fc._forward_hooks = OrderedDict()
    case.check()
    assert case.cell.recaptures == [] and case.cell._guards.unchanged()
    case.model.config = transformers.PretrainedConfig(scale=1.0)
    case.check()
    case.model.config.scale = -2.0
    case.check()
    case.model.fc.register_forward_hook(lambda module, args, out: out * 3.0)
    case.check()
    case.model.factors[0] = 0.25  # a list changed in place
    case.check()
    assert [c.path for changes in case.cell.recaptures for c in changes] == [
        "config", "config.scale", "fc._forward_hooks", "factors"]
    assert case.cell._guards.unchanged()


@pytest.mark.parametrize("mode", MODES)
def test_one_element_weight_replaced(mode):
    """A one-element weight (whose `==` is its value) replaced by an equal one: written, or
    refused by name when its requires_grad differs."""
    case = Case(mode, model=Held)
    case.model.alpha = torch.nn.Parameter(torch.tensor(0.75))
    case.check()
    case.model.alpha = torch.nn.Parameter(torch.tensor(-1.25))
    case.check()
    assert case.cell.recaptures == []
    case.model.alpha = torch.nn.Parameter(torch.tensor(-1.25), requires_grad=False)
    with pytest.raises(TorchModuleChanged, match=r"requires_grad of the torch module's weight "
                                                 r"'alpha'"):
        case.cell(to_ms(X))


def test_graph_call_from_python_checks_once():
    """A GRAPH-mode call from Python takes the changes before MindSpore runs its graph, whose
    check op then skips its own pass; a graph compiled around the Cell checks in its op."""
    case = Case("graph")
    case.check()
    guards, passes = case.cell._guards, []
    quick = guards.unchanged
    guards.unchanged = lambda: passes.append(1) or quick()
    case.cell(to_ms(X))
    assert len(passes) == 1
    case.grad(to_ms(X))
    assert len(passes) == 2
    case.model.scale = -1.5  # and what it skips is still seen by the next call's own check
    case.check()


class Typed(torch.nn.Module):
    """A forward whose dtypes follow the types of Python values: `1` and `1.0` are equal to
    `==` but torch.full makes int64 of one and float32 of the other."""

    def __init__(self):
        super().__init__()
        self.fill = 2
        self.pair = (1, 3)
        self.rows = [[1, 2]]
        self.flat = [1, 3]
        self.table = {"a": 1, "b": 2}
        self.members = {1, 2}
        self.extra: list[int] = []

    def forward(self, x):
        return (x.sum() + torch.full((2,), self.fill) + len(self.extra), torch.tensor(self.pair),
                torch.tensor(self.rows), torch.tensor(self.flat),
                torch.tensor(list(self.table.values())), torch.tensor(sorted(self.members)))


@pytest.mark.parametrize("mode", MODES)
def test_equal_value_of_another_type(mode):
    """An attribute replaced by an equal value of another type, at the top, in a tuple, in a
    nested list edited in place, and in a flat list, dict and set edited in place (the quick
    check's one comparison of their _flat forms): captured again, the dtypes torch's. An empty
    list replaced by another changes nothing, and what is put in the new one later is seen."""
    set_mode(mode)
    model = Typed()
    cell = ms_aten.module(model, (X,))

    def check() -> None:
        for got, expected in zip(cell(to_ms(X)), model(X), strict=True):
            got = to_torch(got)
            assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
            torch.testing.assert_close(got, expected)

    check()
    model.fill = 2.0
    check()
    model.pair = (1.0, 3)
    check()
    model.rows[0][0] = 1.0
    check()
    model.flat[0] = 1.0
    check()
    model.table["a"] = 1.0
    check()
    model.members.discard(1)
    model.members.add(1.0)
    check()
    model.extra = []
    check()
    model.extra.append(5)
    check()
    assert [c.path for changes in cell.recaptures for c in changes] == [
        "fill", "pair", "rows", "flat", "table", "members", "extra"]


def test_quick_check_after_equal_replacements():
    """The per-call check's quick pass (guards._Snapshot) is stricter than the detailed checks
    and never laxer: a NaN in a list replaced by another NaN fails it, the detailed check finds
    no change, and after the record it passes again; a dict's keys reordered in place fail it
    and are a change (its values then come in another order)."""
    module = torch.nn.Linear(2, 2)
    module.limits = [float("nan"), 1.0]
    module.order = {"a": 1, "b": 2}
    guards = Guards(module)
    assert guards.unchanged()
    module.limits[0] = float("nan")
    assert not guards.unchanged()
    assert guards.values() == [] and guards.tree() == [] and guards.weights() == []
    guards.record()
    assert guards.unchanged()
    module.order["a"] = module.order.pop("a")
    assert not guards.unchanged()
    assert [change.path for change in guards.values()] == ["order"]
