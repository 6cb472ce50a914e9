"""torch.optim.Adam and AdamW as MindSpore optimizers over ATen's _fused_adam_ / _fused_adamw_."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mindspore import Parameter, ParameterTuple

from ..native.library import current_target
from ..ops.mutating import MutatingOp
from .fused import FusedOptimizer, check_range


class Adam(FusedOptimizer):
    """torch.optim.Adam, with torch's arguments and update (epsilon added to the bias-corrected
    sqrt(v), where torch adds it; MindSpore's nn.Adam adds it before the correction), as a
    MindSpore optimizer: `optimizer(grads)` updates every parameter, its moments and the step
    count in one launch of ATen's fused kernel. lr may be anything nn.Optimizer takes (a float,
    a Tensor, a list, a LearningRateSchedule). decoupled_weight_decay=True is AdamW."""

    _kernel = "_fused_adam_.tensor_lr"

    def __init__(self, params: Iterable[Parameter], lr: Any = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False,
                 decoupled_weight_decay: bool = False):
        check_range("epsilon value", eps, 0.0)
        if len(betas) != 2:
            raise ValueError(f"betas must be two numbers, got {betas!r}")
        check_range("beta parameter at index 0", betas[0], 0.0, 1.0)
        check_range("beta parameter at index 1", betas[1], 0.0, 1.0)
        check_range("weight_decay value", weight_decay, 0.0)
        super().__init__(params, lr, {"betas": tuple(betas), "eps": eps,
                                      "weight_decay": weight_decay, "amsgrad": amsgrad,
                                      "maximize": maximize,
                                      "decoupled_weight_decay": decoupled_weight_decay})
        self.amsgrad = amsgrad
        self.exp_avg = self._parameters.clone(prefix="exp_avg", init="zeros")
        self.exp_avg_sq = self._parameters.clone(prefix="exp_avg_sq", init="zeros")
        self.max_exp_avg_sq = (self._parameters.clone(prefix="max_exp_avg_sq", init="zeros")
                               if amsgrad else ParameterTuple(()))
        n = self.param_length
        written = ("self", "exp_avgs", "exp_avg_sqs") + (("max_exp_avg_sqs",) if amsgrad else ())
        kernel = "_fused_adamw_.tensor_lr" if decoupled_weight_decay else self._kernel
        self.update = MutatingOp(
            kernel, {"self": n, "grads": n, "exp_avgs": n, "exp_avg_sqs": n,
                     "max_exp_avg_sqs": n if amsgrad else 0, "state_steps": n},
            # Without a grad_scale the kernel leaves the gradients as they are: no copy of them.
            written, current_target(), unwritten=("grads",), beta1=float(betas[0]),
            beta2=float(betas[1]),
            weight_decay=float(weight_decay), eps=float(eps), amsgrad=amsgrad,
            maximize=maximize, grad_scale=None, found_inf=None)

    def state_tensors(self) -> dict[str, ParameterTuple]:
        state = {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq}
        if self.amsgrad:
            state["max_exp_avg_sq"] = self.max_exp_avg_sq
        return state

    def construct(self, gradients):
        lr = self.count_step()
        return self.update(*self._parameters, *gradients, *self.exp_avg, *self.exp_avg_sq,
                           *self.max_exp_avg_sq, *self.steps(), lr)


class AdamW(Adam):
    """torch.optim.AdamW (decoupled weight decay, default 1e-2) over ATen's _fused_adamw_."""

    def __init__(self, params: Iterable[Parameter], lr: Any = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)
