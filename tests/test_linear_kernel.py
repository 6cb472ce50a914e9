"""ms_aten.causal_lm(..., linear_kernel="onednn"): the float32 linears of a million weights or
more on oneDNN's inner product (mkldnn::_linear_pointwise), the smaller ones on ATen's; logits
equal torch eager's to rounding and greedy tokens equal model.generate's, in both modes."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

import ms_aten
from ms_aten.decoding import onednn_linear

from common import set_mode

# The output head (VOCAB x 128, tied to the embedding) has exactly MIN_WEIGHTS weights, so it is
# rewritten; every layer's linear (at most 256 x 128) is not.
VOCAB, CACHE = onednn_linear.MIN_WEIGHTS // 128, 24
ONEDNN = "mkldnn::_linear_pointwise"


def _llama(dtype: torch.dtype = torch.float32) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        initializer_range=0.3, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.LlamaForCausalLM(config).to(dtype).eval()


@pytest.fixture(scope="module")
def model_and_lm() -> tuple[transformers.PreTrainedModel, ms_aten.CausalLM]:
    model = _llama()
    return model, ms_aten.causal_lm(model, max_cache_len=CACHE, linear_kernel="onednn")


def _prompt(length: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(1))


def test_only_the_large_linears_run_on_onednn(model_and_lm):
    _, lm = model_and_lm
    assert lm.onednn_linears == 1
    assert lm.program.spec.count(ONEDNN) == 1
    assert lm.program.spec.count("aten::linear") == 2 * 7  # q, k, v, o, gate, up, down


def test_logits_equal_torch_eager_s_to_rounding(model_and_lm, mode):
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(7)
    with torch.no_grad():
        expected = model(prompt).logits.numpy()
    got = lm(ms_aten.to_ms(prompt), ms_aten.to_ms(torch.arange(7))).asnumpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


def test_greedy_tokens_equal_transformers_generate(model_and_lm, mode):
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(6)
    with torch.no_grad():
        expected = model.generate(prompt, max_new_tokens=10, do_sample=False,
                                  pad_token_id=0).numpy()
    assert len(set(expected[0, 6:].tolist())) > 3  # the test can tell a wrong head
    np.testing.assert_array_equal(
        ms_aten.generate(lm, prompt.numpy(), max_new_tokens=10).asnumpy(), expected)


def test_a_bfloat16_model_keeps_aten_s_linear():
    # oneDNN's bfloat16 inner product needs AVX-512 BF16, which many CPUs lack.
    lm = ms_aten.causal_lm(_llama(torch.bfloat16), max_cache_len=CACHE, linear_kernel="onednn")
    assert lm.onednn_linears == 0 and ONEDNN not in lm.program.spec


def test_an_unknown_kernel_is_refused_by_name():
    with pytest.raises(ValueError, match=r"linear_kernel must be one of \('aten', 'onednn'\), "
                                         r"got 'mkl'"):
        ms_aten.causal_lm(_llama(), max_cache_len=CACHE, linear_kernel="mkl")
