"""ms_aten.generate's sampling at the edge of its draws' range: a float64 draw that rounds to
1.0 in float32 is held below 1, and a draw whose product with the kept probability rounds up to
it still picks a kept token, never a rank past the vocabulary. Both modes."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
import transformers
from mindspore import Tensor, nn

import ms_aten
from ms_aten.decoding import logits_process

from common import set_mode

# A float64 draw that float32 rounds to 1.0 (within 2**-25 of it), and the largest float64
# below 1.0.
ROUNDS_TO_ONE = 1.0 - 2.0 ** -26
BELOW_ONE_64 = np.nextafter(1.0, 0.0)
BELOW_ONE_32 = np.nextafter(np.float32(1.0), np.float32(0.0))


class _Edge:
    """numpy's Generator as ms_aten.generate uses it, drawing only `value`."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self, shape):
        return np.full(shape, self.value, np.float64)


@pytest.mark.parametrize("value", [ROUNDS_TO_ONE, BELOW_ONE_64])
def test_draws_stay_below_one_in_float32(monkeypatch, value):
    assert np.float32(value) == 1.0  # the edge this guards
    monkeypatch.setattr(logits_process.np.random, "default_rng", lambda seed: _Edge(value))
    draws = logits_process.uniform_draws(0, (3, 2))
    assert draws.dtype == np.float32
    assert (draws == BELOW_ONE_32).all()
    # Away from the edge a seed's draws are numpy's, rounded.
    monkeypatch.undo()
    np.testing.assert_array_equal(logits_process.uniform_draws(5, (4,)),
                                  np.random.default_rng(5).random(4).astype(np.float32))


class Sample(nn.Cell):
    def construct(self, scores, draw, temperature, top_k, top_p, min_p):
        return logits_process.sample(scores, draw, temperature, top_k, top_p, min_p)


SCORES = np.array([[2.0, 0.5, 1.0, -1.0, 3.0, 0.0],
                   [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]], np.float32)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
@pytest.mark.parametrize("top_k, last", [(3, [2, 3]), (100, [3, 0])],
                         ids=["top_k_keeps_three", "every_token_kept"])
def test_a_draw_of_one_picks_the_last_kept_token(mode, top_k, last):
    """A draw of 1.0 itself (draw * total == total, every cumulative reaches it) is the worst
    rounding can do: the rank is the last kept token in the sorted order, inside the
    vocabulary; so it is for the largest float32 draw below 1."""
    set_mode(mode)
    sample = Sample()
    controls = (Tensor(1.0, ms.float32), Tensor(top_k, ms.int64), Tensor(1.0, ms.float32),
                Tensor(0.0, ms.float32))
    for draw in (1.0, BELOW_ONE_32):
        tokens = sample(Tensor(SCORES), Tensor(np.full(2, draw, np.float32)), *controls)
        np.testing.assert_array_equal(tokens.asnumpy(), last)


@pytest.fixture(scope="module")
def lm() -> ms_aten.CausalLM:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=32, n_positions=32, n_embd=16, n_layer=1,
                                     n_head=2, bos_token_id=None, eos_token_id=None)
    return ms_aten.causal_lm(transformers.GPT2LMHeadModel(config).eval(), max_cache_len=12)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_generate_with_edge_draws_picks_kept_tokens(lm, mode, monkeypatch):
    """Every draw at the edge: each new token is the least likely of the top-k kept."""
    set_mode(mode)
    prompt = np.array([[3, 1, 4]], np.int64)
    monkeypatch.setattr(logits_process.np.random, "default_rng",
                        lambda seed: _Edge(ROUNDS_TO_ONE))
    out = ms_aten.generate(lm, prompt, max_new_tokens=4, do_sample=True, top_k=5,
                           output_logits=True, seed=0)
    tokens = out.sequences.asnumpy()[0, 3:]
    for token, logits in zip(tokens, out.logits, strict=True):
        row = logits.asnumpy()[0]
        assert token == np.argsort(-row, kind="stable")[4], (token, row)
