"""ms_aten.causal_lm's grouped-query attention on the cache's own key/value heads (SDPA's
enable_gqa in place of transformers' repeat_kv copies): the logits are bitwise those of the
program that copies, for a padded prompt and the decode steps after it, in both modes."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

import ms_aten
from ms_aten.decoding import grouped_attention

from common import MODES, set_mode

VOCAB, CACHE, BATCH = 96, 16, 2


def _llama(kv_heads: int, dtype: torch.dtype = torch.float32) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
        initializer_range=0.3, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.LlamaForCausalLM(config).to(dtype).eval()


@pytest.fixture(scope="module")
def grouped_and_copied() -> tuple[ms_aten.CausalLM, ms_aten.CausalLM]:
    """The same Llama (4 query heads over 2) captured with the pass and without it."""
    model = _llama(kv_heads=2)
    grouped = ms_aten.causal_lm(model, CACHE, BATCH)
    with pytest.MonkeyPatch.context() as patch:
        # The capture cache keys ms_aten's code by its files, not a function patched at run
        # time: off, or the second Cell would read the first's capture.
        patch.setenv("MS_ATEN_PROGRAM_CACHE", "off")
        patch.setattr(grouped_attention, "rewrite", lambda graph_module: 0)
        copied = ms_aten.causal_lm(model, CACHE, BATCH)
    return grouped, copied


def test_each_layer_s_attention_reads_the_unrepeated_heads(grouped_and_copied):
    grouped, copied = grouped_and_copied
    assert grouped.grouped_attentions == 2 and copied.grouped_attentions == 0
    for lm, enable_gqa in ((grouped, "b1"), (copied, "D")):  # SDPA's last (D: default)
        sdpa = [line.split()[-1] for line in lm.program.spec.splitlines()
                if "aten::scaled_dot_product_attention" in line]
        assert sdpa == [enable_gqa] * 2
    # repeat_kv's two copies per layer (clone of the expanded heads) are gone
    assert copied.program.spec.count("aten::clone") - grouped.program.spec.count(
        "aten::clone") == 4


@pytest.mark.parametrize("mode", MODES)
def test_logits_are_bitwise_the_copying_program_s(grouped_and_copied, mode):
    grouped, copied = grouped_and_copied
    set_mode(mode)
    prompt = torch.randint(0, VOCAB, (BATCH, 5), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(BATCH, 5, dtype=torch.long)
    mask[1, :2] = 0  # the second prompt is left-padded
    steps = [(prompt, torch.arange(5), mask)]
    for position in range(5, 8):
        mask = torch.cat([mask, torch.ones(BATCH, 1, dtype=torch.long)], dim=1)
        steps.append((prompt[:, position - 5:position - 4], torch.tensor([position]), mask))
    for ids, positions, step_mask in steps:
        args = [ms_aten.to_ms(t) for t in (ids, positions, step_mask)]
        np.testing.assert_array_equal(grouped(*args).asnumpy(), copied(*args).asnumpy())


def test_a_bfloat16_model_is_rewritten_too():
    assert ms_aten.causal_lm(_llama(2, torch.bfloat16), CACHE, BATCH).grouped_attentions == 2


def test_attention_without_groups_is_left_as_captured():
    # One key/value head per query head: repeat_kv repeats nothing.
    assert ms_aten.causal_lm(_llama(kv_heads=4), CACHE, BATCH).grouped_attentions == 0
