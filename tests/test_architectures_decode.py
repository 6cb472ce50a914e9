"""ms_aten.causal_lm and ms_aten.generate across the causal LMs transformers' static cache
serves: for each, the greedy tokens of a left-padded batch of two prompts with its attention
mask equal model.generate's, in PYNATIVE mode, and in GRAPH mode for an MoE (Mixtral) and
an alibi model (BLOOM). The models it cannot serve are refused by name, and decoding goes on.
Tiny configs (one layer, hidden 64, 4 heads, 2 key/value heads where the architecture has
them), random weights: a capture each, its cost."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch
import transformers as T

import ms_aten

from common import set_mode

# The cache just holds the longer prompt (7) and the new tokens (the last one is not fed
# back): the last step attends to every position of it.
VOCAB, NEW = 128, 6
CACHE = 7 + NEW - 1
# Large enough weights that greedy decoding does not settle on one token, and a wrong mask or
# cache shows.
COMMON = dict(vocab_size=VOCAB, initializer_range=0.3, bos_token_id=None, eos_token_id=None,
              pad_token_id=None)


def _decoder(config: type[T.PretrainedConfig], **kwargs) -> T.PretrainedConfig:
    """A Llama-like config: grouped-query attention (4 query heads share 2 key/value)."""
    return config(**{**COMMON, **dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64), **kwargs})


# Each architecture: its model class and config. Sliding windows (Mistral's, and Gemma 2 and
# 3's local layers, the layer here: their global ones are Gemma's) are shorter than prompt +
# new tokens, so that they take effect.
SERVED: dict[str, Callable[[], tuple[type, T.PretrainedConfig]]] = {
    "gpt2": lambda: (T.GPT2LMHeadModel, T.GPT2Config(
        n_positions=64, n_embd=64, n_layer=1, n_head=4, **COMMON)),
    "llama": lambda: (T.LlamaForCausalLM, _decoder(T.LlamaConfig)),
    "qwen2": lambda: (T.Qwen2ForCausalLM, _decoder(T.Qwen2Config)),
    "qwen3": lambda: (T.Qwen3ForCausalLM, _decoder(T.Qwen3Config, head_dim=16)),
    "mistral": lambda: (T.MistralForCausalLM, _decoder(T.MistralConfig, sliding_window=8)),
    "gemma": lambda: (T.GemmaForCausalLM, _decoder(T.GemmaConfig, head_dim=16)),
    # Untied: Gemma 2 and 3's scaled embeddings, tied to the head, make a random model repeat
    # the prompt's last token.
    "gemma2": lambda: (T.Gemma2ForCausalLM, _decoder(
        T.Gemma2Config, head_dim=16, sliding_window=8, tie_word_embeddings=False,
        layer_types=["sliding_attention"])),
    "gemma3": lambda: (T.Gemma3ForCausalLM, _decoder(
        T.Gemma3TextConfig, head_dim=16, sliding_window=8, tie_word_embeddings=False,
        layer_types=["sliding_attention"])),
    "phi3": lambda: (T.Phi3ForCausalLM, _decoder(T.Phi3Config)),
    "olmo": lambda: (T.OlmoForCausalLM, _decoder(T.OlmoConfig)),
    "stablelm": lambda: (T.StableLmForCausalLM, _decoder(T.StableLmConfig)),
    "starcoder2": lambda: (T.Starcoder2ForCausalLM, _decoder(T.Starcoder2Config)),
    "gpt_neox": lambda: (T.GPTNeoXForCausalLM, T.GPTNeoXConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        max_position_embeddings=64, **COMMON)),
    "opt": lambda: (T.OPTForCausalLM, T.OPTConfig(
        hidden_size=64, ffn_dim=128, num_hidden_layers=1, num_attention_heads=4,
        max_position_embeddings=64, word_embed_proj_dim=64, **COMMON)),
    # Multi-query attention (one key/value head) in parallel with the MLP.
    "falcon": lambda: (T.FalconForCausalLM, T.FalconConfig(
        hidden_size=64, num_hidden_layers=1, num_attention_heads=4, **COMMON)),
    "gptj": lambda: (T.GPTJForCausalLM, T.GPTJConfig(
        n_embd=64, n_layer=1, n_head=4, rotary_dim=8, n_positions=64, **COMMON)),
    "codegen": lambda: (T.CodeGenForCausalLM, T.CodeGenConfig(
        n_embd=64, n_layer=1, n_head=4, rotary_dim=8, n_positions=64, n_ctx=64, **COMMON)),
    # Alibi; a larger scale, or greedy decoding settles.
    "bloom": lambda: (T.BloomForCausalLM, T.BloomConfig(
        hidden_size=64, n_layer=1, n_head=4, **{**COMMON, "initializer_range": 1.0})),
    "mixtral": lambda: (T.MixtralForCausalLM, _decoder(
        T.MixtralConfig, num_local_experts=4, num_experts_per_tok=2)),
}
GRAPH = ("mixtral", "bloom")

# Each refused architecture, its config, and the reason the refusal names.
REFUSED = {
    "mamba": (lambda: (T.MambaForCausalLM, T.MambaConfig(
        hidden_size=64, num_hidden_layers=2, vocab_size=VOCAB)), "takes no past_key_values"),
    "qwen3_next": (lambda: (T.Qwen3NextForCausalLM, _decoder(
        T.Qwen3NextConfig, num_hidden_layers=2, head_dim=16,
        layer_types=["linear_attention", "full_attention"])),
        "its cache has LinearAttentionLayer layers"),
    "ctrl": (lambda: (T.CTRLLMHeadModel, T.CTRLConfig(
        n_embd=64, n_layer=1, n_head=4, dff=128, n_positions=64, **COMMON)),
        "torch.export cannot capture"),
}


def _model(build: Callable[[], tuple[type, T.PretrainedConfig]]) -> T.PreTrainedModel:
    torch.manual_seed(0)
    model_class, config = build()
    return model_class(config).eval()


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of 7 and 3 tokens, left-padded, with their mask, as a tokenizer makes them."""
    generator = torch.Generator().manual_seed(7)
    ids = torch.zeros(2, 7, dtype=torch.long)
    ids[0] = torch.randint(1, VOCAB, (7,), generator=generator)
    ids[1, 4:] = torch.randint(1, VOCAB, (3,), generator=generator)
    return ids, (ids != 0).long()


@pytest.fixture(scope="module")
def served(batch) -> Iterator[Callable[[str], tuple[ms_aten.CausalLM, np.ndarray]]]:
    """Each architecture's Cell, captured once for both modes, and model.generate's tokens."""
    ids, mask = batch
    made: dict[str, tuple[ms_aten.CausalLM, np.ndarray]] = {}

    def get(name: str) -> tuple[ms_aten.CausalLM, np.ndarray]:
        if name not in made:
            model = _model(SERVED[name])
            with torch.no_grad():
                expected = model.generate(ids, attention_mask=mask, max_new_tokens=NEW,
                                          do_sample=False, pad_token_id=0).numpy()
            made[name] = ms_aten.causal_lm(model, max_cache_len=CACHE, batch_size=2), expected
        return made[name]

    yield get
    made.clear()


def _generate(lm: ms_aten.CausalLM, batch: tuple[torch.Tensor, torch.Tensor]) -> np.ndarray:
    ids, mask = batch
    return ms_aten.generate(lm, ids.numpy(), attention_mask=mask.numpy(),
                            max_new_tokens=NEW).asnumpy()


@pytest.mark.parametrize("name, mode", [*((name, "pynative") for name in SERVED),
                                        *((name, "graph") for name in GRAPH)])
def test_a_padded_batch_decodes_as_transformers(served, batch, name, mode):
    lm, expected = served(name)
    set_mode(mode)
    np.testing.assert_array_equal(_generate(lm, batch), expected)
    assert len(set(expected[1, 7:].tolist())) > 2  # the padded row can tell a wrong mask


@pytest.mark.parametrize("name", list(REFUSED))
def test_an_architecture_not_served_is_refused_by_name(served, batch, name):
    build, reason = REFUSED[name]
    model = _model(build)
    set_mode("pynative")
    with pytest.raises(ms_aten.CaptureError,
                       match=rf"causal_lm\({type(model).__name__}\): .* is not served: .*{reason}"):
        ms_aten.causal_lm(model, max_cache_len=CACHE, batch_size=2)
    lm, expected = served("gpt2")  # the process goes on decoding
    np.testing.assert_array_equal(_generate(lm, batch), expected)
