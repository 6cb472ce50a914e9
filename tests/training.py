"""Training a model both ways, for the tests: the ms_aten Cell with a MindSpore optimizer, and
the torch module with a torch one, each from its own copy of the same weights, on the same data."""
from __future__ import annotations

import copy
from collections.abc import Callable

import mindspore as ms
import models
import torch
from loss_cell import LossCell
from mindspore import Parameter, nn

import ms_aten
from ms_aten import to_ms

from common import set_mode

STEPS = 30


def train_ms(case: models.Case, mode: str, make: Callable[[list[Parameter]], nn.Optimizer],
             steps: int = STEPS, compile: bool | dict = False
             ) -> tuple[list[float], ms_aten.TorchModule, nn.Optimizer]:
    """`steps` training steps of the ms_aten model (ms_aten.module's `compile=`) with the
    optimizer `make` builds, its first step verified against torch eager (verify=1: values
    and gradients); the losses, the cell and the optimizer."""
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(case.module), case.inputs, compile=compile, verify=1)
    optimizer = make(cell.trainable_params())
    grad_fn = ms.value_and_grad(LossCell(cell, case.loss), None, optimizer.parameters)

    def step(x, target):
        loss, grads = grad_fn(x, target)
        optimizer(grads)
        return loss

    if mode == "graph":
        step = ms.jit(step)
    x, target = to_ms(case.inputs[0]), to_ms(case.target)
    losses = [float(step(x, target)) for _ in range(steps)]
    assert cell._verifier.done == 1 and cell._verifier.backwards == 0  # checked, and passed
    return losses, cell, optimizer


def train_torch(case: models.Case, make: Callable[[list], torch.optim.Optimizer],
                steps: int = STEPS, lrs: list[float] | None = None
                ) -> tuple[list[float], torch.nn.Module, torch.optim.Optimizer]:
    module = copy.deepcopy(case.module)
    optimizer = make(list(module.parameters()))
    losses = []
    for k in range(steps):
        if lrs is not None:
            for group in optimizer.param_groups:
                group["lr"] = lrs[k]
        optimizer.zero_grad()
        loss = models.torch_loss(case.loss, models.logits(module(*case.inputs)), case.target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, module, optimizer
