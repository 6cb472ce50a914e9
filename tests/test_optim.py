"""ms_aten.optim: torch's Adam, AdamW and SGD as MindSpore optimizers over ATen's fused kernels,
trained on GPT-2 against torch.optim with the same weights, data and hyperparameters."""
from __future__ import annotations

import copy
import re

import mindspore as ms
import models
import numpy as np
import pytest
import torch
from mindspore import Parameter, Tensor
from mindspore.nn.learning_rate_schedule import LearningRateSchedule
from training import STEPS, train_ms, train_torch

import ms_aten

from common import set_mode

LR = 1e-2


def gpt2() -> models.Case:
    torch.manual_seed(0)
    return models.gpt2()


def assert_weights_match(case: models.Case, got: dict[str, np.ndarray],
                         want: dict[str, np.ndarray], rtol: float = 1e-4) -> None:
    """Every trained weight within rtol of torch's. Adam divides by sqrt(v): a weight whose true
    gradient is zero (GPT-2's attention key bias: softmax ignores a shift shared by a query's
    scores) follows rounding noise there, on both sides alike, so the elements whose first
    gradient is below 1e-6 of the largest are left out."""
    probe = copy.deepcopy(case.module)
    models.torch_loss(case.loss, models.logits(probe(*case.inputs)), case.target).backward()
    grads = {name: p.grad.abs() for name, p in probe.named_parameters()}
    scale = max(g.max().item() for g in grads.values())
    for name, value in got.items():
        signal = (grads[name] > 1e-6 * scale).numpy()
        np.testing.assert_allclose(value[signal], want[name][signal], rtol=rtol,
                                   atol=rtol * np.abs(want[name]).max(), err_msg=name)


def assert_follows_torch(case: models.Case, ms_losses: list[float], cell: ms_aten.TorchModule,
                         torch_losses: list[float], module: torch.nn.Module,
                         rtol: float = 1e-4) -> None:
    """Every step's loss, and every trained weight, within rtol of torch's."""
    np.testing.assert_allclose(ms_losses, torch_losses, rtol=rtol)
    # The loss moved (down, or up under maximize=True), so the comparison means something.
    assert abs(torch_losses[-1] - torch_losses[0]) > 0.1 * torch_losses[0]
    assert_weights_match(case, {p.name.removeprefix("net."): p.asnumpy()  # LossCell's prefix
                                for p in cell.trainable_params()},
                         {n: p.detach().numpy() for n, p in module.named_parameters()}, rtol)


OPTIMIZERS = {  # name -> (ms_aten's, torch's), the same arguments
    "adam": (lambda p: ms_aten.optim.Adam(p, lr=LR),
             lambda p: torch.optim.Adam(p, lr=LR)),
    "adam_amsgrad_decay": (
        lambda p: ms_aten.optim.Adam(p, lr=LR, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1,
                                     amsgrad=True),
        lambda p: torch.optim.Adam(p, lr=LR, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1,
                                   amsgrad=True)),
    "adamw": (lambda p: ms_aten.optim.AdamW(p, lr=LR, weight_decay=0.1),
              lambda p: torch.optim.AdamW(p, lr=LR, weight_decay=0.1)),
    "adam_maximize": (lambda p: ms_aten.optim.Adam(p, lr=LR, maximize=True),
                      lambda p: torch.optim.Adam(p, lr=LR, maximize=True)),
    "sgd_momentum": (lambda p: ms_aten.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.2,
                                                  weight_decay=1e-3),
                     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.2,
                                               weight_decay=1e-3)),
    "sgd_nesterov": (lambda p: ms_aten.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
                     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True)),
    "sgd_plain": (lambda p: ms_aten.optim.SGD(p, lr=0.1),
                  lambda p: torch.optim.SGD(p, lr=0.1)),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_training_follows_torch_optim(name, mode):
    case = gpt2()
    ours, theirs = OPTIMIZERS[name]
    ms_losses, cell, _ = train_ms(case, mode, ours)
    torch_losses, module, _ = train_torch(case, theirs)
    assert_follows_torch(case, ms_losses, cell, torch_losses, module)


class HalvingLR(LearningRateSchedule):
    """A LearningRateSchedule: lr halves every 10 steps."""

    def construct(self, global_step):
        return LR * 0.5 ** (global_step // 10).astype(ms.float32)


@pytest.mark.parametrize("schedule", ["list", "LearningRateSchedule"])
def test_scheduled_learning_rate_drives_the_fused_kernel(schedule, mode):
    """nn.Optimizer's learning rates (one value per step, or a schedule Cell of the step count)
    reach the kernel, step by step, as torch's lr set before each step does."""
    lrs = [LR * 0.5 ** (k // 10) for k in range(STEPS)]
    lr = lrs if schedule == "list" else HalvingLR()
    case = gpt2()
    ms_losses, cell, _ = train_ms(case, mode, lambda p: ms_aten.optim.Adam(p, lr=lr))
    torch_losses, module, _ = train_torch(case, lambda p: torch.optim.Adam(p, lr=LR), lrs=lrs)
    assert_follows_torch(case, ms_losses, cell, torch_losses, module)


def test_one_launch_per_step_and_the_state_is_parameters():
    case = gpt2()
    set_mode("graph")
    cell = ms_aten.module(copy.deepcopy(case.module), case.inputs)
    params = cell.trainable_params()
    optimizer = ms_aten.optim.Adam(params, lr=LR, amsgrad=True)
    grads = tuple(Tensor(np.ones(p.shape, np.float32)) for p in params)
    before = ms_aten.launch_count()
    optimizer(grads)
    assert ms_aten.launch_count() - before == 1  # every parameter, moment and step: one kernel
    assert float(optimizer.step.asnumpy()) == 1.0
    names = {p.name for p in optimizer.get_parameters()}
    for state in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
        assert f"{state}.transformer.wte.weight" in names
    np.testing.assert_allclose(optimizer.exp_avg[0].asnumpy(), 0.1)  # (1 - beta1) * grad


@pytest.mark.parametrize("make", [
    lambda p: ms_aten.optim.Adam(p, lr=LR, maximize=True, weight_decay=0.1),
    lambda p: ms_aten.optim.AdamW(p, lr=LR, amsgrad=True),
    lambda p: ms_aten.optim.SGD(p, lr=LR, momentum=0.9, nesterov=True, maximize=True)],
    ids=["Adam", "AdamW", "SGD"])
def test_the_step_leaves_the_gradients_as_they_were(make, mode):
    # The fused kernels get the gradients' own buffers, uncopied: they write them only to
    # unscale them by a grad_scale, which ms_aten.optim never passes.
    set_mode(mode)
    params = [Parameter(Tensor(np.full((64, 32), 0.5, np.float32)), name="w"),
              Parameter(Tensor(np.full((8,), -0.5, np.float32)), name="b")]
    grads = tuple(Tensor(np.random.default_rng(i).standard_normal(p.shape).astype(np.float32))
                  for i, p in enumerate(params))
    before = [g.asnumpy().copy() for g in grads]
    optimizer = make(params)
    optimizer(grads)
    optimizer(grads)
    for grad, want in zip(grads, before, strict=True):
        np.testing.assert_array_equal(grad.asnumpy(), want)
    assert not np.allclose(params[0].asnumpy(), 0.5)


def test_state_dict_round_trip_with_torch(mode):
    """Five steps here, the state to torch.optim.Adam, five more there, and the same back: both
    continue as one optimizer that took all ten steps."""
    case = gpt2()
    make = OPTIMIZERS["adam_amsgrad_decay"]
    _, cell, optimizer = train_ms(case, mode, make[0], steps=5)
    module = copy.deepcopy(case.module)
    module.load_state_dict(cell.torch_state_dict())
    resumed = make[1](list(module.parameters()))
    resumed.load_state_dict(optimizer.torch_state_dict())
    for _ in range(5):
        resumed.zero_grad()
        models.torch_loss(case.loss, models.logits(module(*case.inputs)), case.target).backward()
        resumed.step()
    _, reference, reference_optimizer = train_torch(case, make[1], steps=10)
    assert_weights_match(case, {n: p.detach().numpy() for n, p in module.named_parameters()},
                         {n: p.detach().numpy() for n, p in reference.named_parameters()})

    back = make[0](cell.trainable_params())
    back.load_torch_state_dict(reference_optimizer.state_dict())
    assert float(back.step.asnumpy()) == 10.0
    for got, (name, want) in zip(back.exp_avg_sq, reference_optimizer.state_dict()["state"].items(),
                                 strict=True):
        np.testing.assert_allclose(got.asnumpy(), want["exp_avg_sq"].numpy(), err_msg=str(name))


@pytest.mark.parametrize("make, error, message", [
    (lambda p: ms_aten.optim.Adam(p, lr=-1.0), ValueError, "Invalid learning rate: -1.0"),
    (lambda p: ms_aten.optim.Adam(p, betas=(0.9, 1.0)), ValueError,
     "Invalid beta parameter at index 1: 1.0"),
    (lambda p: ms_aten.optim.Adam(p, eps=-1e-8), ValueError, "Invalid epsilon value"),
    (lambda p: ms_aten.optim.AdamW(p, weight_decay=-0.1), ValueError, "Invalid weight_decay"),
    (lambda p: ms_aten.optim.SGD(p, nesterov=True), ValueError,
     "Nesterov momentum requires a momentum and zero dampening"),
    (lambda p: ms_aten.optim.SGD(p, momentum="0.9"), TypeError, "momentum value must be a number"),
    (lambda p: ms_aten.optim.SGD([{"params": p}]), TypeError, "parameter groups"),
    (lambda p: ms_aten.optim.Adam([*p, Parameter(Tensor(np.zeros(3, np.int32)), name="count")]),
     TypeError, "parameter 'count' is Int32; torch's fused kernels update floating-point"),
])
def test_bad_arguments_are_errors_naming_them(make, error, message):
    params = [Parameter(Tensor(np.zeros(3, np.float32)), name="w")]
    with pytest.raises(error, match=re.escape(message)):
        make(params)
