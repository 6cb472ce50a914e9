"""The MindSpore side of tests/models.py's losses: LossCell scores an ms_aten model's output as
models.torch_loss scores torch's; SumOf makes any Cell or function a scalar to differentiate."""
from __future__ import annotations

from mindspore import nn, ops


class LossCell(nn.Cell):
    """torch_loss's twin in MindSpore: the model runs in ms_aten, the loss (and the optimizer)
    are MindSpore's, as in a real port."""

    def __init__(self, net: nn.Cell, kind: str):
        super().__init__()
        self.net = net
        self.kind = kind

    def construct(self, x, target):
        out = self.net(x)
        if isinstance(out, dict):  # an HF model's output, by field name
            out = out["logits"]
        if self.kind == "lm":
            return ops.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        if self.kind == "class":
            return ops.cross_entropy(out, target)
        return ops.mse_loss(out, target)


class SumOf(nn.Cell):
    """f(x).sum(): a scalar of any Cell or function's output, for ms.grad."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def construct(self, x):
        return self.f(x).sum()
