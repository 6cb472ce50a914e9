"""What ms_aten.module runs as an opaque torch call (issue 55), the decoding route refuses by
name: ms_aten.causal_lm captures a tiny Llama's step strictly, as one graph, so a layer whose
forward branches on a value, loops on `.item()`, hooks a tensor or has a module backward hook
is a CaptureError naming torch.export's reason and why no opaque call is made, in both modes,
where transformers' model.generate decodes the same model. Never a crash, never other
tokens."""
from __future__ import annotations

import copy

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


# name: (how layer 1 changes, what the CaptureError says torch.export or ms_aten refused)
CASES = {
    "value_branch": (lambda layer: Branch(layer.mlp), "Data-dependent branching"),
    "item_loop": (lambda layer: Loop(layer.mlp), "Could not guard on data-dependent expression"),
    "tensor_hook": (lambda layer: Hooked(layer.mlp), "Tensor.register_hook()"),
    "module_backward_hook": (_backward_hook, "a module backward hook "
                             "(register_full_backward_hook) on "
                             "'wrapper.model.model.layers.1.mlp'"),
}


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
    change, reason = CASES[name]
    model = copy.deepcopy(llama)
    layer = model.model.layers[1]
    layer.mlp = change(layer)
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # transformers decodes it
        assert model.generate(prompt, max_new_tokens=3, do_sample=False,
                              pad_token_id=0).shape == (1, 8)
    set_mode(mode)
    with pytest.raises(ms_aten.CaptureError) as refused:
        ms_aten.causal_lm(model, max_cache_len=16)
    message = str(refused.value)
    assert message.startswith("ms_aten.causal_lm(LlamaForCausalLM): LlamaForCausalLM is not "
                              "served: ")
    assert reason in message
    assert "ms_aten.causal_lm captures the step strictly, as one graph" in message
    assert "no backward hook fires" in message
    assert "strict=False or None" not in message  # not the caller's to choose here
