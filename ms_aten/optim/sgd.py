"""torch.optim.SGD as a MindSpore optimizer over ATen's _fused_sgd_."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mindspore import Parameter, ParameterTuple

from ..native.library import current_target
from ..ops.mutating import MutatingOp
from .fused import FusedOptimizer, check_range


class SGD(FusedOptimizer):
    """torch.optim.SGD, with torch's arguments and update (momentum, dampening, Nesterov, weight
    decay, maximize), as a MindSpore optimizer: one launch of ATen's fused kernel per step
    updates every parameter and momentum buffer. As in torch, the first step sets each momentum
    buffer to its gradient; the kernel takes that as a constant, so the optimizer holds two
    kernels and picks by the step count (a branch in GRAPH mode)."""

    counts_steps = False  # torch's SGD keeps no step

    def __init__(self, params: Iterable[Parameter], lr: Any = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False, *,
                 maximize: bool = False):
        check_range("momentum value", momentum, 0.0)
        check_range("weight_decay value", weight_decay, 0.0)
        check_range("dampening value", dampening, 0.0)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, lr, {"momentum": momentum, "dampening": dampening,
                                      "weight_decay": weight_decay, "nesterov": nesterov,
                                      "maximize": maximize})
        self.has_momentum = momentum != 0
        self.momentum_buffer = (self._parameters.clone(prefix="momentum_buffer", init="zeros")
                                if self.has_momentum else ParameterTuple(()))
        n = self.param_length

        def kernel(first: bool) -> MutatingOp:
            return MutatingOp(
                "_fused_sgd_.tensor_lr",
                {"self": n, "grads": n, "momentum_buffer_list": n if self.has_momentum else 0},
                ("self", "momentum_buffer_list") if self.has_momentum else ("self",),
                # Without a grad_scale the kernel leaves the gradients as they are: no copy.
                current_target(), unwritten=("grads",), weight_decay=float(weight_decay),
                momentum=float(momentum),
                dampening=float(dampening), nesterov=nesterov, maximize=maximize,
                is_first_step=first, grad_scale=None, found_inf=None)

        self.first_update = kernel(True)
        self.update = kernel(False)

    def state_tensors(self) -> dict[str, ParameterTuple]:
        return {"momentum_buffer": self.momentum_buffer} if self.has_momentum else {}

    def construct(self, gradients):
        lr = self.count_step()
        if self.has_momentum and self.step == 1:
            return self.first_update(*self._parameters, *gradients, *self.momentum_buffer, lr)
        return self.update(*self._parameters, *gradients, *self.momentum_buffer, lr)
