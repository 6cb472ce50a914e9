"""The base of ms_aten's optimizers: an nn.Optimizer over torch's fused in-place kernels.

What torch keeps per parameter as optimizer state (moments, momentum buffers) are MindSpore
Parameters here, cloned from the parameters, so MindSpore checkpoints them and GRAPH mode lets
the kernel write them. The step count is one float32 Parameter, `step`, which torch's fused
kernels read per parameter (state_steps) and which is handed to them once per parameter. The
learning rate is nn.Optimizer's: a float, a 0-dim Tensor, a 1-dim Tensor or an iterable (one
value per step) or a LearningRateSchedule; it reaches the kernels as a tensor (their
`tensor_lr` overloads), so a schedule drives them inside a compiled graph.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import mindspore as ms
import torch
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

from ..native.convert import to_ms, to_torch

FLOATS = (ms.float16, ms.bfloat16, ms.float32, ms.float64)  # what the fused kernels update


def check_range(name: str, value: float, low: float, high: float | None = None) -> None:
    """torch's argument checks, with torch's messages ("Invalid learning rate: -1")."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if value < low or (high is not None and value >= high):
        raise ValueError(f"Invalid {name}: {value}")


class FusedOptimizer(nn.Optimizer):
    """Common to Adam, AdamW and SGD: the parameters checked, the step counter, torch's
    hyperparameters (`defaults`, by torch's names) and a torch-format state dict."""

    counts_steps = True  # torch keeps a `step` per parameter in its state (Adam; SGD does not)

    def __init__(self, params: Iterable[Parameter], lr: Any, defaults: Mapping[str, Any]):
        params = list(params)
        if any(isinstance(p, dict) for p in params):
            raise TypeError(f"{type(self).__name__}: parameter groups (dicts) are not supported; "
                            f"use one optimizer per group")
        for p in params:
            if not isinstance(p, Parameter):
                raise TypeError(f"{type(self).__name__}: expects MindSpore Parameters, got "
                                f"{type(p).__name__}")
            if p.dtype not in FLOATS:
                raise TypeError(f"{type(self).__name__}: parameter '{p.name}' is {p.dtype}; "
                                f"torch's fused kernels update floating-point parameters only")
        if isinstance(lr, (int, float)) and not isinstance(lr, bool):
            check_range("learning rate", lr, 0.0)
        # weight_decay 0: nn.Optimizer's own decay skips parameters named beta or gamma, torch
        # decays every parameter; the fused kernel does it, as torch's.
        super().__init__(lr, params, weight_decay=0.0)
        self.defaults = dict(defaults)
        self.step = Parameter(Tensor(0.0, ms.float32), name="step")
        self.one = Tensor(1.0, ms.float32)

    def state_tensors(self) -> dict[str, ParameterTuple]:
        """torch's per-parameter state names -> this optimizer's Parameters for them."""
        raise NotImplementedError

    def count_step(self) -> Tensor:
        """The learning rate of this step, counting it: nn.Optimizer's global_step (which a
        LearningRateSchedule reads before the increment) and the fused kernels' `step`."""
        lr = self.get_lr()
        self.assignadd(self.global_step, self.global_step_increase_tensor)
        ops.assign_add(self.step, self.one)
        return lr

    def steps(self) -> tuple:
        """The step count once per parameter: the fused kernels' state_steps."""
        return (self.step,) * self.param_length

    def torch_state_dict(self) -> dict:
        """The optimizer's state in torch's format, for torch.optim's load_state_dict."""
        step = float(self.step.asnumpy())
        state = {}
        for i in range(self.param_length):
            entry = {name: to_torch(tensors[i].value()) for name, tensors in
                     self.state_tensors().items()}
            if self.counts_steps:
                entry["step"] = torch.tensor(step)
            state[i] = entry
        group = dict(self.defaults, lr=float(self.get_lr().asnumpy()),
                     params=list(range(self.param_length)))
        return {"state": state, "param_groups": [group]}

    def load_torch_state_dict(self, state_dict: Mapping) -> None:
        """Takes the state of a torch optimizer of the same kind over the same parameters
        (torch.optim's state_dict()); the learning rate stays this optimizer's."""
        state = state_dict["state"]
        for name, tensors in self.state_tensors().items():
            for i, tensor in enumerate(tensors):
                if i not in state or name not in state[i]:
                    raise KeyError(f"{type(self).__name__}: the state dict has no '{name}' for "
                                   f"parameter {i}")
                tensor.set_data(to_ms(state[i][name].detach()))
        if self.counts_steps and state:
            self.step.set_data(Tensor(float(state[0]["step"]), ms.float32))
