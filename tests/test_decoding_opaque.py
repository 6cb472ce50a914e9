"""What ms_aten.module runs as an opaque torch call (issue 55), the decoding route refuses by
name: ms_aten.causal_lm captures a tiny Llama's step strictly, as one graph, so a layer whose
forward branches on a value, loops on `.item()`, hooks a tensor or has a module backward hook
is a CaptureError naming torch.export's reason and why no opaque call is made, in both modes,
where transformers' model.generate decodes the same model; so is a layer that specializes the
sequence length. What the strict capture traces (a Python float read from a tensor, numpy in
the middle) decodes to model.generate's tokens. Never a crash, never other tokens."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import transformers
from torch import nn

import ms_aten

from common import set_mode

VOCAB = 96


class Branch(nn.Module):
    """The layer's MLP, negated input when its sum is negative: a branch on a value."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp(h) if h.sum() > 0 else self.mlp(-h) * 0.5


class Loop(Branch):
    """The MLP applied a number of times read from a value."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for _ in range(int((h.abs().mean() > 0).item()) + 1):
            h = self.mlp(h)
        return h


class Hooked(Branch):
    """A hook that doubles the MLP's output gradient, where a gradient is recorded (never in
    model.generate, which runs without grad; a capture records one)."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        z = self.mlp(h)
        if z.requires_grad:
            z.register_hook(lambda g: g * 2)
        return z


def _backward_hook(layer: nn.Module) -> nn.Module:
    layer.mlp.register_full_backward_hook(lambda module, grad_in, grad_out: (grad_in[0] * 2,))
    return layer.mlp


class Lengths(Branch):
    """A list as long as the sequence: the length specialized to the capture's."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp(h) * len((torch.arange(h.shape[1]) % 2 + 1).tolist())


class Scale(Branch):
    """The MLP's output divided by a Python float read from the input."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp(h) / float(h.abs().max())


class Numpy(Branch):
    """The MLP's input through numpy in the middle."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.from_numpy(np.tanh(h.detach().numpy())))


STRICT_ONLY = "ms_aten.causal_lm captures the step strictly, as one graph"
EVERY_LENGTH = "ms_aten.causal_lm's one capture serves every sequence length"

# name: (how layer 1 changes, what the CaptureError says torch.export or ms_aten refused, why
# the decoding route cannot take it)
CASES = {
    "value_branch": (lambda layer: Branch(layer.mlp), "Data-dependent branching", STRICT_ONLY),
    "item_loop": (lambda layer: Loop(layer.mlp), "Could not guard on data-dependent expression",
                  STRICT_ONLY),
    "tensor_hook": (lambda layer: Hooked(layer.mlp), "Tensor.register_hook()", STRICT_ONLY),
    "module_backward_hook": (_backward_hook, "a module backward hook "
                             "(register_full_backward_hook) on "
                             "'wrapper.model.model.layers.1.mlp'", STRICT_ONLY),
    "specialized_length": (lambda layer: Lengths(layer.mlp),
                           "your code specialized it to be a constant", EVERY_LENGTH),
}
DECODED = {"python_float": Scale, "numpy": Numpy}


def _prompt() -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def llama() -> transformers.PreTrainedModel:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        initializer_range=0.3, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("name", list(CASES))
def test_a_part_torch_export_refuses_is_refused_by_name(llama, name, mode):
    change, reason, why = CASES[name]
    model = copy.deepcopy(llama)
    layer = model.model.layers[1]
    layer.mlp = change(layer)
    with torch.no_grad():  # transformers decodes it
        assert model.generate(_prompt(), max_new_tokens=3, do_sample=False,
                              pad_token_id=0).shape == (1, 8)
    set_mode(mode)
    with pytest.raises(ms_aten.CaptureError) as refused:
        ms_aten.causal_lm(model, max_cache_len=16)
    message = str(refused.value)
    assert message.startswith("ms_aten.causal_lm(LlamaForCausalLM): LlamaForCausalLM is not "
                              "served: ")
    assert reason in message
    assert why in message
    if why == STRICT_ONLY:
        assert "no backward hook fires" in message
    assert "strict=False or None" not in message  # not the caller's to choose here
    assert "narrow the range" not in message  # nor dynamic_shapes


@pytest.fixture(scope="module", params=list(DECODED))
def decoded(request, llama) -> tuple[transformers.PreTrainedModel, ms_aten.CausalLM]:
    model = copy.deepcopy(llama)
    model.model.layers[1].mlp = DECODED[request.param](model.model.layers[1].mlp)
    return model, ms_aten.causal_lm(model, max_cache_len=16)


def test_a_value_read_from_a_tensor_decodes_as_transformers(decoded, mode):
    model, lm = decoded
    with torch.no_grad():
        expected = model.generate(_prompt(), max_new_tokens=8, do_sample=False,
                                  pad_token_id=0).numpy()
    set_mode(mode)
    got = ms_aten.generate(lm, _prompt().numpy(), max_new_tokens=8).asnumpy()
    np.testing.assert_array_equal(got, expected)
    assert len(set(expected[0, 5:].tolist())) > 2  # the test can tell a wrong layer
