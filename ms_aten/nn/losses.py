"""The loss Cells: each holds one ms_aten.op of ATen's loss (its backward is ATen's derivative)
and takes the arguments of the torch.nn class of its name. The deprecated `size_average` and
`reduce` are not taken: `reduction` says the same."""
from __future__ import annotations

from typing import Any, TypeAlias

import mindspore as ms
import numpy as np
import torch
from mindspore import nn

from ..native.convert import to_ms
from ..ops.op import op

# torch's reduction enum (torch.nn._reduction.get_enum), as ATen's loss ops take it.
_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
Weight: TypeAlias = "ms.Tensor | torch.Tensor | np.ndarray | None"


def _as_ms(name: str, value: Weight) -> ms.Tensor | None:
    if value is None or isinstance(value, ms.Tensor):
        return value
    if isinstance(value, torch.Tensor):
        return to_ms(value.detach())
    if isinstance(value, np.ndarray):
        return ms.Tensor(value)
    raise TypeError(f"{name} takes a MindSpore or torch tensor or a numpy array, got "
                    f"{type(value).__name__}")


class AtenLoss(nn.Cell):
    """ATen's loss op `op_name` with torch's `reduction` ('none', 'mean', 'sum'); `constants` are
    the op's other arguments, `optional` its optional tensors (torch's per-class `weight`, ...:
    constants without a gradient, as torch holds them as buffers), passed after the call's own
    tensors when given. Its subclasses' construct takes the call's tensors."""

    def __init__(self, op_name: str, reduction: str = "mean",
                 optional: dict[str, Weight] | None = None, **constants: Any):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"ms_aten.nn.{type(self).__name__}: reduction={reduction!r} is not "
                             f"one of {', '.join(map(repr, _REDUCTIONS))}")
        self.reduction = reduction
        given = {name: _as_ms(f"ms_aten.nn.{type(self).__name__}: {name}", value)
                 for name, value in (optional or {}).items()}
        # An absent one is the op's constant None: MindSpore cannot pass None to a kernel.
        absent = {name: None for name, value in given.items() if value is None}
        self.optional = tuple(value for value in given.values() if value is not None)
        self.aten = op(op_name, reduction=_REDUCTIONS[reduction], **absent, **constants)


class _TargetLoss(AtenLoss):
    """A loss over (input, target)."""

    # Targets of class indices: int64 as torch takes them, int32 (MindSpore's datasets' and
    # own losses' labels) widened to it.
    index_target = False

    def construct(self, input, target):
        if self.index_target and target.dtype == ms.int32:
            target = target.astype(ms.int64)
        return self.aten(input, target, *self.optional)


class _PairLoss(AtenLoss):
    """A loss over two inputs and a target of ±1 (torch's argument order)."""

    def construct(self, input1, input2, target):
        return self.aten(input1, input2, target)


class L1Loss(_TargetLoss):
    """torch.nn.L1Loss: the mean (or sum) absolute error."""

    def __init__(self, reduction: str = "mean"):
        super().__init__("l1_loss", reduction)


class MSELoss(_TargetLoss):
    """torch.nn.MSELoss: the mean (or sum) squared error."""

    def __init__(self, reduction: str = "mean"):
        super().__init__("mse_loss", reduction)


class SmoothL1Loss(_TargetLoss):
    """torch.nn.SmoothL1Loss: squared below `beta`, absolute above."""

    def __init__(self, reduction: str = "mean", beta: float = 1.0):
        super().__init__("smooth_l1_loss", reduction, beta=beta)


class HuberLoss(_TargetLoss):
    """torch.nn.HuberLoss: squared below `delta`, `delta`-scaled absolute above."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__("huber_loss", reduction, delta=delta)


class SoftMarginLoss(_TargetLoss):
    """torch.nn.SoftMarginLoss: log(1 + exp(-target * input)), targets ±1."""

    def __init__(self, reduction: str = "mean"):
        super().__init__("soft_margin_loss", reduction)


class HingeEmbeddingLoss(_TargetLoss):
    """torch.nn.HingeEmbeddingLoss: targets ±1, `margin` for the -1 ones."""

    def __init__(self, margin: float = 1.0, reduction: str = "mean"):
        super().__init__("hinge_embedding_loss", reduction, margin=margin)


class PoissonNLLLoss(_TargetLoss):
    """torch.nn.PoissonNLLLoss: the input is the log of the rate when `log_input`; `full` adds
    Stirling's term."""

    def __init__(self, log_input: bool = True, full: bool = False, eps: float = 1e-8,
                 reduction: str = "mean"):
        super().__init__("poisson_nll_loss", reduction, log_input=log_input, full=full, eps=eps)


class KLDivLoss(_TargetLoss):
    """torch.nn.KLDivLoss: the input holds log-probabilities (the target too when
    `log_target`); reduction 'batchmean' is the sum over the batch's first dimension's size,
    the mathematically correct KL divergence."""

    def __init__(self, reduction: str = "mean", log_target: bool = False):
        batchmean = reduction == "batchmean"
        super().__init__("kl_div", "sum" if batchmean else reduction, log_target=log_target)
        self.batchmean = batchmean
        self.reduction = reduction

    def construct(self, input, target):
        reduced = self.aten(input, target)
        if self.batchmean and input.ndim != 0:
            return reduced / input.shape[0]
        return reduced


class CrossEntropyLoss(_TargetLoss):
    """torch.nn.CrossEntropyLoss over logits (N, C) or (N, C, d1, ...): class indices or class
    probabilities as the target, `ignore_index`, `label_smoothing` and a per-class `weight`."""

    index_target = True

    def __init__(self, weight: Weight = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__("cross_entropy_loss", reduction, {"weight": weight},
                         ignore_index=ignore_index, label_smoothing=label_smoothing)


class NLLLoss(_TargetLoss):
    """torch.nn.NLLLoss over log-probabilities (N, C) or (N, C, d1, ...)."""

    index_target = True

    def __init__(self, weight: Weight = None, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__("nll_loss_nd", reduction, {"weight": weight}, ignore_index=ignore_index)


class BCELoss(_TargetLoss):
    """torch.nn.BCELoss over probabilities; `weight` rescales each element's loss."""

    def __init__(self, weight: Weight = None, reduction: str = "mean"):
        super().__init__("binary_cross_entropy", reduction, {"weight": weight})


class MultiMarginLoss(_TargetLoss):
    """torch.nn.MultiMarginLoss: a multi-class hinge loss (`p` 1 or 2)."""

    index_target = True

    def __init__(self, p: int = 1, margin: float = 1.0, weight: Weight = None,
                 reduction: str = "mean"):
        if p not in (1, 2):
            raise ValueError(f"ms_aten.nn.MultiMarginLoss: p={p!r}; only p == 1 and p == 2 are "
                             f"supported (as in torch)")
        super().__init__("multi_margin_loss", reduction, {"weight": weight}, p=p, margin=margin)


class BCEWithLogitsLoss(_TargetLoss):
    """torch.nn.BCEWithLogitsLoss: a sigmoid and binary cross entropy in one, numerically
    stable; `pos_weight` weighs the positive examples of each class."""

    def __init__(self, weight: Weight = None, reduction: str = "mean",
                 pos_weight: Weight = None):
        super().__init__("binary_cross_entropy_with_logits", reduction,
                         {"weight": weight, "pos_weight": pos_weight})


class MarginRankingLoss(_PairLoss):
    """torch.nn.MarginRankingLoss: max(0, -target * (input1 - input2) + margin)."""

    def __init__(self, margin: float = 0.0, reduction: str = "mean"):
        super().__init__("margin_ranking_loss", reduction, margin=margin)


class CosineEmbeddingLoss(_PairLoss):
    """torch.nn.CosineEmbeddingLoss: 1 - cos for targets 1, max(0, cos - margin) for -1."""

    def __init__(self, margin: float = 0.0, reduction: str = "mean"):
        super().__init__("cosine_embedding_loss", reduction, margin=margin)


class TripletMarginLoss(AtenLoss):
    """torch.nn.TripletMarginLoss over (anchor, positive, negative)."""

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, reduction: str = "mean"):
        super().__init__("triplet_margin_loss", reduction, margin=margin, p=p, eps=eps,
                         swap=swap)

    def construct(self, anchor, positive, negative):
        return self.aten(anchor, positive, negative)
