"""ms_aten.generate over a bfloat16 model (the benchmark decodes one): tiny grouped-query Llama,
random weights, a left-padded batch, both modes, tokens equal to model.generate's (both run
torch's bfloat16 kernels; the choice is made in float32 on both sides)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from test_generate import CACHE, _llama
from test_generate_batch import PAD, _left_padded, _prompts, _torch

import ms_aten

from common import set_mode


@pytest.fixture(scope="module")
def model_and_lm() -> tuple[torch.nn.Module, ms_aten.CausalLM]:
    torch.manual_seed(0)
    model = _llama().to(torch.bfloat16).eval()
    return model, ms_aten.causal_lm(model, max_cache_len=CACHE, batch_size=2)


def test_a_bfloat16_model_decodes_a_padded_batch_as_transformers(model_and_lm, mode):
    model, lm = model_and_lm
    set_mode(mode)
    ids, mask = _left_padded(_prompts(7, 4, seed=3))
    expected = _torch(model, ids, 12, attention_mask=mask)
    got = ms_aten.generate(lm, ids.numpy(), attention_mask=mask.numpy(), max_new_tokens=12,
                           pad_token_id=PAD).asnumpy()
    np.testing.assert_array_equal(got, expected)
    assert len(set(got[1, 7:].tolist())) > 3  # the test can tell a wrong step
