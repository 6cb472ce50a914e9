"""ms_aten.nn's loss Cells against torch.nn's classes of the same name: value and the gradient
of every floating input, both modes, each reduction, float32 and float64, zero-size batches,
and the errors."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mindspore as ms
import numpy as np
import pytest
import torch

import ms_aten.nn

from common import set_mode, to_ms, to_torch


def _logits(n: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(n, 5, dtype=dtype)


def _classes(n: int, dtype: torch.dtype) -> torch.Tensor:
    target = torch.randint(0, 5, (n,))
    return target if n < 3 else target.index_fill(0, torch.tensor([2]), -100)  # ignore_index


def _signs(n: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randint(0, 2, (n,)).to(dtype) * 2 - 1


@dataclass(frozen=True)
class Case:
    """A loss class by name, its keyword arguments, and its inputs for a batch of n."""

    name: str
    inputs: Callable[[int, torch.dtype], tuple[torch.Tensor, ...]]
    kwargs: dict[str, Any] = field(default_factory=dict)
    fixed: tuple[int, ...] = ()  # floating inputs torch does not differentiate

    def __str__(self) -> str:
        return self.name + "".join(f"-{k}" for k in self.kwargs)


WEIGHT = torch.rand(5, dtype=torch.float64) + 0.5
CASES = [
    Case("L1Loss", lambda n, d: (torch.randn(n, 3, dtype=d), torch.randn(n, 3, dtype=d))),
    Case("MSELoss", lambda n, d: (torch.randn(n, 3, dtype=d), torch.randn(n, 3, dtype=d))),
    Case("SmoothL1Loss", lambda n, d: (torch.randn(n, 3, dtype=d), torch.randn(n, 3, dtype=d)),
         {"beta": 0.5}),
    Case("HuberLoss", lambda n, d: (torch.randn(n, 3, dtype=d), torch.randn(n, 3, dtype=d)),
         {"delta": 0.7}),
    Case("SoftMarginLoss", lambda n, d: (torch.randn(n, dtype=d), _signs(n, d)), fixed=(1,)),
    Case("HingeEmbeddingLoss", lambda n, d: (torch.randn(n, dtype=d), _signs(n, d)),
         {"margin": 0.5}),
    Case("PoissonNLLLoss", lambda n, d: (torch.randn(n, 3, dtype=d), torch.rand(n, 3, dtype=d) * 4),
         {"full": True}),
    Case("KLDivLoss", lambda n, d: (torch.randn(n, 5, dtype=d).log_softmax(-1),
                                    torch.randn(n, 5, dtype=d).softmax(-1))),
    Case("CrossEntropyLoss", lambda n, d: (_logits(n, d), _classes(n, d)),
         {"label_smoothing": 0.1}),
    Case("CrossEntropyLoss", lambda n, d: (_logits(n, d), _classes(n, d)), {"weight": WEIGHT}),
    Case("CrossEntropyLoss", lambda n, d: (torch.randn(n, 5, 2, dtype=d),
                                           torch.randn(n, 5, 2, dtype=d).softmax(1))),
    Case("NLLLoss", lambda n, d: (_logits(n, d).log_softmax(-1), _classes(n, d)),
         {"weight": WEIGHT}),
    Case("BCELoss", lambda n, d: (torch.rand(n, 5, dtype=d) * 0.9 + 0.05,
                                  torch.rand(n, 5, dtype=d)), {"weight": WEIGHT}),
    Case("BCEWithLogitsLoss", lambda n, d: (_logits(n, d), torch.rand(n, 5, dtype=d)),
         {"pos_weight": WEIGHT}),
    Case("MultiMarginLoss", lambda n, d: (_logits(n, d), torch.randint(0, 5, (n,))),
         {"p": 2, "margin": 0.5, "weight": WEIGHT}),
    Case("MarginRankingLoss", lambda n, d: (torch.randn(n, dtype=d), torch.randn(n, dtype=d),
                                            _signs(n, d)), {"margin": 0.2}),
    Case("CosineEmbeddingLoss", lambda n, d: (torch.randn(n, 4, dtype=d),
                                              torch.randn(n, 4, dtype=d), _signs(n, d)),
         {"margin": 0.1}),
    Case("TripletMarginLoss", lambda n, d: tuple(torch.randn(n, 4, dtype=d) for _ in range(3)),
         {"swap": True}),
]


def _check(case: Case, reduction: str, dtype: torch.dtype, mode: str, n: int = 4) -> None:
    inputs = case.inputs(n, dtype)
    kwargs = {k: v.to(dtype) if isinstance(v, torch.Tensor) else v
              for k, v in case.kwargs.items()}
    reference = getattr(torch.nn, case.name)(reduction=reduction, **kwargs)
    leaves = [x.clone().requires_grad_(x.dtype.is_floating_point and i not in case.fixed)
              for i, x in enumerate(inputs)]
    expected = reference(*leaves)
    differentiable = [i for i, x in enumerate(leaves) if x.requires_grad]
    expected_grads = torch.autograd.grad(expected.sum(), [leaves[i] for i in differentiable],
                                         allow_unused=True)

    set_mode(mode)
    loss = getattr(ms_aten.nn, case.name)(reduction=reduction, **kwargs)
    value, grads = ms.value_and_grad(loss, grad_position=tuple(differentiable))(*to_ms(inputs))
    torch.testing.assert_close(to_torch(value), expected.detach(), equal_nan=True)
    grads = grads if isinstance(grads, tuple) else (grads,)  # MindSpore unpacks one gradient
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(to_torch(got), want if want is not None else
                                   torch.zeros_like(to_torch(got)), equal_nan=True)


# torch's own note on KLDivLoss's 'mean' (ms_aten.nn's is the same mean).
pytestmark = pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss")


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_torch_in_both_modes(case: Case, mode: str) -> None:
    _check(case, "mean", torch.float32, mode)


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_each_reduction_in_float64(case: Case, reduction: str) -> None:
    _check(case, reduction, torch.float64, "pynative")


def test_kl_div_batchmean(mode: str) -> None:
    _check(Case("KLDivLoss", CASES[7].inputs, {"log_target": False}), "batchmean",
           torch.float32, mode)


@pytest.mark.parametrize("name", ["MSELoss", "CrossEntropyLoss"])
def test_zero_size_batch(name: str, mode: str) -> None:
    case = next(c for c in CASES if c.name == name)
    _check(case, "mean", torch.float32, mode, n=0)  # torch's nan
    _check(case, "sum", torch.float32, mode, n=0)


def test_inside_a_trained_cell_like_mindspores_own_loss(mode: str) -> None:
    """A Dense classifier trained with ms_aten.nn.CrossEntropyLoss follows the one trained with
    MindSpore's nn.CrossEntropyLoss (the same mathematics) step for step."""
    set_mode(mode)
    x = ms.Tensor(np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32))
    y = ms.Tensor(np.arange(8).astype(np.int32) % 3)
    losses = []
    for loss_fn in (ms_aten.nn.CrossEntropyLoss(), ms.nn.CrossEntropyLoss()):
        ms.set_seed(0)
        net = ms.nn.WithLossCell(ms.nn.Dense(6, 3), loss_fn)
        step = ms.nn.TrainOneStepCell(net, ms.nn.SGD(net.trainable_params(), learning_rate=0.5))
        losses.append([float(step(x, y).asnumpy()) for _ in range(4)])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    assert losses[0][-1] < losses[0][0]


def test_no_warning_from_an_out_kernel_that_was_not_kept(capfd: pytest.CaptureFixture) -> None:
    """soft_margin_loss.out resizes MindSpore's fixed output (torch warns about it), so the
    kernel runs the functional call instead: the warning is not the user's."""
    set_mode("pynative")
    x, y = to_ms((torch.randn(8), _signs(8, torch.float32)))
    ms_aten.nn.SoftMarginLoss()(x, y).asnumpy()
    assert "resized" not in capfd.readouterr().err


def test_errors_name_the_loss_and_the_process_goes_on() -> None:
    with pytest.raises(ValueError, match="CrossEntropyLoss: reduction='avg' is not one of"):
        ms_aten.nn.CrossEntropyLoss(reduction="avg")
    with pytest.raises(TypeError, match="NLLLoss: weight takes a MindSpore or torch tensor"):
        ms_aten.nn.NLLLoss(weight=[1.0, 2.0])
    with pytest.raises(ValueError, match="MultiMarginLoss: p=3"):
        ms_aten.nn.MultiMarginLoss(p=3)
    set_mode("pynative")
    loss = ms_aten.nn.CrossEntropyLoss()
    logits = ms.Tensor(np.zeros((2, 5), np.float32))
    with pytest.raises(RuntimeError, match="cross_entropy_loss"):
        loss(logits, ms.Tensor(np.array([1, 7], np.int64)))  # a class out of range
    value = loss(logits, ms.Tensor(np.array([1, 4], np.int64)))
    assert abs(float(value.asnumpy()) - np.log(5)) < 1e-6
