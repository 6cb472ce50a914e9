"""MobileBERT with a dynamic sequence length (issue 55's Tests list): transformers'
MobileBertForSequenceClassification from a tiny config (random weights), captured once with the
sequence dim dynamic and trained 5 steps with MindSpore's optimizer on batches of three lengths,
against torch's optimizer on the torch model: the loss of every step and the final weights,
both modes. As it is, non-strict tracing refuses it (the trigram embedding guards the length
against 2) and the strict capture takes it whole, length 2 included; with a module backward
hook in a layer, that layer runs as an opaque torch call inside the non-strict capture, whose
range then starts at 3. A range wider than the model takes is refused with torch's guards and
suggested fix, without the opaque route."""
from __future__ import annotations

import copy
from collections.abc import Callable

import mindspore as ms
import numpy as np
import pytest
import torch
import transformers
from mindspore import nn

import ms_aten

from common import set_mode, to_ms

POSITIONS = 64
LR, MOMENTUM = 0.1, 0.9


def _double_input_gradient(module, grad_in, grad_out):
    return tuple(None if g is None else g * 2 for g in grad_in)


def _plain(model: torch.nn.Module) -> None:
    pass


def _hooked(model: torch.nn.Module) -> None:
    model.mobilebert.encoder.layer[1].output.register_full_backward_hook(_double_input_gradient)


# variant: (what is done to the model, the dynamic length's least value, a length per step)
VARIANTS: dict[str, tuple[Callable[[torch.nn.Module], None], int, tuple[int, ...]]] = {
    "whole": (_plain, 2, (8, 5, 8, 2, 5)),
    "module_backward_hook": (_hooked, 3, (8, 5, 8, 3, 5)),
}


def _model() -> transformers.PreTrainedModel:
    config = transformers.MobileBertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=32, embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
        num_feedforward_networks=1, max_position_embeddings=POSITIONS, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    return transformers.MobileBertForSequenceClassification(config)


def _batch(length: int, seed: int) -> dict[str, torch.Tensor]:
    """Two sequences, the second left-padded by one token, and their labels."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, 0] = 0
    return {"input_ids": torch.randint(1, 100, (2, length), generator=g),
            "attention_mask": mask, "labels": torch.randint(0, 3, (2,), generator=g)}


def _capture(model: torch.nn.Module, seq: torch.export.Dim) -> ms_aten.TorchModule:
    return ms_aten.module(model, (), _batch(8, 0), dynamic_shapes={
        "input_ids": {1: seq}, "attention_mask": {1: seq}, "labels": None})


@pytest.fixture(scope="module", params=list(VARIANTS))
def captured(request) -> tuple[str, torch.nn.Module, torch.nn.Module, ms_aten.TorchModule]:
    """The torch model, the copy its Cell was captured from (once, for both modes), the Cell."""
    change, least, _ = VARIANTS[request.param]
    model = _model()
    change(model)
    seq = torch.export.Dim("seq", min=least, max=POSITIONS)
    captured_from = copy.deepcopy(model)
    if request.param == "whole":
        cell = _capture(captured_from, seq)
    else:
        with pytest.warns(ms_aten.OpaqueWarning, match=r"encoder\.layer\.1\.output "
                                                       r"\(MobileBertOutput\)"):
            cell = _capture(captured_from, seq)
    return request.param, model, captured_from, cell


class Loss(nn.Cell):
    def __init__(self, net: nn.Cell):
        super().__init__()
        self.net = net

    def construct(self, input_ids, attention_mask, labels):
        return self.net(input_ids=input_ids, attention_mask=attention_mask, labels=labels)["loss"]


def test_five_steps_over_three_lengths_match_torch(captured, mode):
    variant, model, captured_from, cell = captured
    # Each mode trains from the model's weights, which the Cell takes from its torch module at
    # its next call (the other mode's test trained the Cell's Parameters).
    captured_from.load_state_dict(model.state_dict())
    set_mode(mode)
    optimizer = nn.SGD(cell.trainable_params(), learning_rate=LR, momentum=MOMENTUM)
    grad_fn = ms.value_and_grad(Loss(cell), None, optimizer.parameters)

    def step(input_ids, attention_mask, labels):
        loss, grads = grad_fn(input_ids, attention_mask, labels)
        optimizer(grads)
        return loss

    if mode == "graph":
        step = ms.jit(step)
    reference = copy.deepcopy(model)
    torch_optimizer = torch.optim.SGD(reference.parameters(), lr=LR, momentum=MOMENTUM)
    lengths = VARIANTS[variant][2]
    losses, expected = [], []
    for k, length in enumerate(lengths):
        batch = _batch(length, seed=k)
        losses.append(float(step(*to_ms(tuple(batch.values())))))
        torch_optimizer.zero_grad()
        loss = reference(**batch).loss
        loss.backward()
        torch_optimizer.step()
        expected.append(loss.item())
    np.testing.assert_allclose(losses, expected, rtol=1e-5, atol=1e-6)
    assert len(set(np.round(expected, 4))) == len(lengths)  # the weights moved every step
    trained = cell.torch_state_dict()
    for key, value in reference.state_dict().items():
        np.testing.assert_allclose(trained[key].numpy(), value.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=key)


def test_a_range_the_model_does_not_take_is_refused_with_torchs_fix():
    """Past max_position_embeddings the position ids run out: torch.export's guard, which no
    opaque part could lift, and its suggested range, in the CaptureError."""
    with pytest.raises(ms_aten.CaptureError) as refused:
        _capture(_model(), torch.export.Dim("seq"))
    message = str(refused.value)
    assert "Constraints violated (seq)" in message
    assert f"Suggested fixes:\n  seq = Dim('seq', max={POSITIONS})" in message
    assert "opaque" not in message


def test_a_length_the_non_strict_capture_cannot_take_is_refused_with_what_to_narrow():
    """With a region (the backward hook's), only non-strict tracing can capture, and it guards
    the length against 2, a guard torch suggests no fix for."""
    model = _model()
    _hooked(model)
    guard = r"satisfy the generated guard \(\(-1\) \+ L\['input_ids'\]\.size\(\)\[1\]\) != 1"
    with pytest.raises(ms_aten.CaptureError, match=guard) as refused:
        _capture(model, torch.export.Dim("seq", max=POSITIONS))
    assert "narrow the range until every guard above holds" in str(refused.value)


class Positions(torch.nn.Module):
    """A learned position table of 16 rows, read by the input's length."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(16, 4))

    def forward(self, x):
        return x + self.table[: x.shape[0]]


def test_other_spellings_of_a_range_too_wide_are_refused_with_torchs_fix():
    """A module and a function, each reading a table by a dynamic length without a maximum."""
    n = torch.export.Dim("n")
    table = torch.randn(16, 4)
    for capture in (lambda: ms_aten.module(Positions(), (torch.randn(5, 4),),
                                           dynamic_shapes=({0: n},)),
                    lambda: ms_aten.function(lambda x: x * table[: x.shape[0]],
                                             (torch.randn(5, 4),), dynamic_shapes=({0: n},))):
        with pytest.raises(ms_aten.CaptureError, match="Constraints violated") as refused:
            capture()
        assert "Suggested fixes:\n  n = Dim('n', max=16)" in str(refused.value)
        assert "opaque" not in str(refused.value)
