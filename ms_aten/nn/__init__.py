"""torch.nn's losses as MindSpore loss Cells: each runs ATen's own loss op (one launch forward,
one backward), with torch's arguments, defaults and semantics.

    loss_fn = ms_aten.nn.CrossEntropyLoss(label_smoothing=0.1)
    loss, grads = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, weights)(x, y)

They take MindSpore tensors and work in GRAPH and PYNATIVE mode, under ms.grad and inside
other Cells, like MindSpore's own losses.
"""
from .losses import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    HingeEmbeddingLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MarginRankingLoss,
    MSELoss,
    MultiMarginLoss,
    NLLLoss,
    PoissonNLLLoss,
    SmoothL1Loss,
    SoftMarginLoss,
    TripletMarginLoss,
)

__all__ = ["BCELoss", "BCEWithLogitsLoss", "CosineEmbeddingLoss", "CrossEntropyLoss",
           "HingeEmbeddingLoss", "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss",
           "MarginRankingLoss", "MultiMarginLoss", "NLLLoss", "PoissonNLLLoss", "SmoothL1Loss",
           "SoftMarginLoss", "TripletMarginLoss"]
