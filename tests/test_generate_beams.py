"""ms_aten.generate's beam search and stop_strings against model.generate: one prompt and a
left-padded batch, end tokens that finish beams early so that length_penalty and
early_stopping (True, False, "never") change the result, the processors on the log-softmax,
num_return_sequences; stop_strings with a tokenizer made in memory, greedy and with beams;
what beam search cannot take refused by name. One tiny grouped-query Llama, random weights, a
cache of six rows (one prompt with six beams, or two with three), both modes."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from test_generate import CACHE, VOCAB, _llama
from test_generate_batch import PAD, _left_padded, _prompts, _torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

import ms_aten

from common import set_mode

ROWS = 6
# End tokens with which the padded batch's beams finish early (found by trying sets with this
# model and batch): early_stopping=True and False then give different tokens at
# length_penalty=3, and False and "never" at length_penalty=1.
EOS = [14, 22, 76, 84]
PAD_OR_EOS = EOS[0]  # transformers fills with `pad_token_id or eos[0]`: pad 0 gives eos[0]


@pytest.fixture(scope="module")
def model_and_lm() -> tuple[transformers.PreTrainedModel, ms_aten.CausalLM]:
    torch.manual_seed(0)
    model = _llama().eval()
    return model, ms_aten.causal_lm(model, max_cache_len=CACHE, batch_size=ROWS)


@pytest.fixture(scope="module")
def tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A byte-level tokenizer made in memory, no download: one token per character ("!" to
    "~", a space, a newline), as GPT-2's spells them, so that StopStringCriteria reads its
    tokens' bytes as it does GPT-2's."""
    characters = [chr(c) for c in range(33, 127)] + ["\u0120", "\u010a"]  # Ġ: " ", Ċ: "\n"
    backend = Tokenizer(models.BPE({c: i for i, c in enumerate(characters)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend)


def _padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([[PAD, PAD, PAD, 5, 6, 7], [1, 2, 3, 4, 5, 9]])
    return ids, (ids != PAD).long()


def test_beam_search_of_one_prompt_equals_transformers(model_and_lm, mode):
    """Six beams, the best one and the best three; then with end tokens held back by
    min_new_tokens and a repetition penalty, which transformers applies to the log-softmax."""
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompts(5, seed=12)[0]
    expected = _torch(model, prompt, 10, num_beams=6, num_return_sequences=3)
    got = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=10, num_beams=6,
                           num_return_sequences=3)
    np.testing.assert_array_equal(got.asnumpy(), expected)
    assert not np.array_equal(expected[:1], _torch(model, prompt, 10))  # beams are not greedy
    best = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=10, num_beams=6).asnumpy()
    np.testing.assert_array_equal(best, expected[:1])
    controls = {"num_beams": 6, "num_return_sequences": 2, "eos_token_id": EOS,
                "min_new_tokens": 4, "repetition_penalty": 1.5}
    with torch.no_grad():
        expected = model.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=PAD,
                                  output_logits=True, return_dict_in_generate=True, **controls)
    assert not np.array_equal(expected.sequences.numpy(), _torch(
        model, prompt, 10, num_beams=6, num_return_sequences=2, eos_token_id=EOS))
    out = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=10, output_logits=True,
                           **controls)
    np.testing.assert_array_equal(out.sequences.asnumpy(), expected.sequences.numpy())
    assert len(out.logits) == len(expected.logits)
    for mine, theirs in zip(out.logits, expected.logits, strict=True):  # the running beams'
        np.testing.assert_allclose(mine.asnumpy(), theirs.numpy(), rtol=1e-4, atol=1e-4)


SETTINGS = [(True, 3.0), (False, 3.0), ("never", 1.0), (False, 1.0), (False, -1.0)]


@pytest.fixture(scope="module")
def padded_expected(model_and_lm) -> dict[tuple[bool | str, float], np.ndarray]:
    """model.generate's two best hypotheses of each prompt, for each setting."""
    model, _ = model_and_lm
    ids, mask = _padded_batch()
    return {(stop, penalty): _torch(model, ids, 12, attention_mask=mask, num_beams=3,
                                    num_return_sequences=2, eos_token_id=EOS,
                                    early_stopping=stop, length_penalty=penalty)
            for stop, penalty in SETTINGS}


def test_the_settings_change_transformers_beams(padded_expected):
    """The next test can fail: each of early_stopping and length_penalty matters here, and
    beams end early (pad tokens after them)."""
    def differ(a, b):
        return not np.array_equal(padded_expected[a], padded_expected[b])
    assert differ((True, 3.0), (False, 3.0)) and differ((False, 1.0), ("never", 1.0))
    assert differ((False, 1.0), (False, -1.0))
    assert (padded_expected[(False, -1.0)][:, 6:] == PAD_OR_EOS).any()


def test_a_padded_batch_with_early_stopping_and_length_penalty_equals_transformers(
        model_and_lm, padded_expected, mode):
    _, lm = model_and_lm
    set_mode(mode)
    ids, mask = (t.numpy() for t in _padded_batch())
    for (stop, penalty), expected in padded_expected.items():
        got = ms_aten.generate(lm, ids, attention_mask=mask, max_new_tokens=12, num_beams=3,
                               num_return_sequences=2, eos_token_id=EOS, pad_token_id=0,
                               early_stopping=stop, length_penalty=penalty)
        np.testing.assert_array_equal(got.asnumpy(), expected, err_msg=f"{stop}, {penalty}")


def _stop_string(tokenizer, tokens: np.ndarray) -> str:
    """The text of two tokens (StopStringCriteria matches text, across tokens)."""
    return tokenizer.decode([int(t) for t in tokens])


def test_stop_strings_stop_rows_as_transformers(model_and_lm, tokenizer, mode):
    """Greedy, a batch of six, a stop string from each row's own tokens at a different step:
    with an end token each row is padded after its stop; without one every row runs on until
    all have stopped, as in transformers. Then with beams."""
    model, lm = model_and_lm
    set_mode(mode)
    ids, mask = _left_padded(_prompts(4, 6, 2, 5, 3, 6, seed=13))
    plain = _torch(model, ids, 12, attention_mask=mask)
    stops = [_stop_string(tokenizer, plain[row, 6 + step:8 + step])
             for row, step in enumerate((1, 3, 5, 2, 4, 6))]
    for options in ({}, {"eos_token_id": VOCAB - 1}):
        options.update(attention_mask=mask, stop_strings=stops, tokenizer=tokenizer,
                       pad_token_id=0)
        expected = _torch(model, ids, 12, **options)
        got = ms_aten.generate(lm, ids.numpy(), max_new_tokens=12,
                               **{**options, "attention_mask": mask.numpy()}).asnumpy()
        np.testing.assert_array_equal(got, expected, err_msg=str(list(options)))
        assert got.shape[1] < plain.shape[1]
    assert (got[0, 9:] == 0).all() and (got[:, 6:] != plain[:, 6:got.shape[1]]).any()
    prompt = ids[5:]
    best = _torch(model, prompt, 8, num_beams=6)
    beams = {"num_beams": 6, "stop_strings": [_stop_string(tokenizer, best[0, 7:9])],
             "tokenizer": tokenizer}
    expected = _torch(model, prompt, 8, **beams)
    np.testing.assert_array_equal(
        ms_aten.generate(lm, prompt.numpy(), max_new_tokens=8, **beams).asnumpy(), expected)
    assert expected.shape != best.shape or not np.array_equal(expected, best)


def test_what_beam_search_cannot_take_is_refused_by_name(model_and_lm, tokenizer, mode):
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompts(4, seed=14)[0].numpy()
    refused = [({"num_beams": 3}, r"1 prompts with num_beams=3 need 3 cache rows, but the "
                                  r"cache holds batch_size=6"),
               ({"num_beams": 6, "do_sample": True}, r"does not support beam sampling"),
               ({"num_beams": 6, "streamer": object()}, r"a streamer cannot be used with beam"),
               ({"num_beams": 6, "num_return_sequences": 7},
                r"num_return_sequences=7 must be from 1 to num_beams=6"),
               ({"num_beams": 6, "early_stopping": "sometimes"},
                r"early_stopping must be True, False or 'never'"),
               ({"stop_strings": ["w1"]}, r"stop_strings needs the model's tokenizer")]
    for options, message in refused:
        prompts = prompt if "num_beams" in options else np.repeat(prompt, ROWS, 0)
        with pytest.raises(ValueError, match=message):
            ms_aten.generate(lm, prompts, max_new_tokens=4, **options)
    # decoding goes on, in GRAPH mode in the same compiled graphs
    np.testing.assert_array_equal(
        ms_aten.generate(lm, prompt, max_new_tokens=6, num_beams=6).asnumpy(),
        _torch(model, torch.from_numpy(prompt), 6, num_beams=6))
