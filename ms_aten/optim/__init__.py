"""torch's optimizers as MindSpore optimizers: each an nn.Optimizer whose update is one launch of
ATen's fused CPU kernel over every parameter, written in place.

    optimizer = ms_aten.optim.Adam(cell.trainable_params(), lr=1e-3, betas=(0.9, 0.999))
    loss, grads = ms.value_and_grad(loss_fn, None, optimizer.parameters)(x, y)
    optimizer(grads)

A port then trains with exactly torch's update (Adam's epsilon where torch puts it), so its
losses follow torch's at any learning rate.
"""
from .adam import Adam, AdamW
from .sgd import SGD

__all__ = ["SGD", "Adam", "AdamW"]
