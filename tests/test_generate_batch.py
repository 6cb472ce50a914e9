"""ms_aten.generate as transformers users run it, against model.generate: a left-padded batch
with its attention mask (each row's tokens also those of its prompt alone), the decoding
controls (repetition_penalty, min_new_tokens, a list of end tokens, pad_token_id,
num_return_sequences, min_p), a streamer called as transformers calls it, and the arguments
it does not take refused by name. Tiny GPT-2 and grouped-query Llama, random weights, a cache
of two sequences, both modes."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
import transformers
from test_generate import CACHE, VOCAB, _gpt2, _llama

import ms_aten

from common import set_mode

PAD = 0


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model_and_lm(request) -> tuple[transformers.PreTrainedModel, ms_aten.CausalLM]:
    torch.manual_seed(0)
    model = {"gpt2": _gpt2, "llama": _llama}[request.param]().eval()
    return model, ms_aten.causal_lm(model, max_cache_len=CACHE, batch_size=2)


def _prompts(*lengths: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (1, n), generator=generator) for n in lengths]


def _left_padded(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask as a tokenizer with padding_side='left' makes them."""
    width = max(p.shape[1] for p in prompts)
    ids = torch.full((len(prompts), width), PAD)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - prompt.shape[1]:] = prompt[0]
        mask[row, width - prompt.shape[1]:] = 1
    return ids, mask


def _torch(model, ids: torch.Tensor, new: int, **kwargs) -> np.ndarray:
    kwargs.setdefault("pad_token_id", PAD)
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=new, do_sample=False, **kwargs).numpy()


def test_the_step_masks_left_padding_as_transformers(model_and_lm, mode):
    """The Cell's third input is transformers' mask: the prompt's logits at its tokens equal
    the model's with that mask and model.generate's position ids."""
    model, lm = model_and_lm
    set_mode(mode)
    ids, mask = _left_padded(_prompts(6, 3, seed=1))
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, position_ids=positions).logits.numpy()
    got = lm(ms.Tensor(ids.numpy()), ms.Tensor(np.arange(6)), ms.Tensor(mask.numpy())).asnumpy()
    kept = mask.numpy().astype(bool)
    np.testing.assert_allclose(got[kept], expected[kept], rtol=1e-4, atol=1e-4)


def test_a_padded_batch_decodes_as_transformers_and_as_each_prompt_alone(model_and_lm, mode):
    model, lm = model_and_lm
    set_mode(mode)
    prompts = _prompts(7, 3, seed=2)
    ids, mask = _left_padded(prompts)
    expected = _torch(model, ids, 12, attention_mask=mask)
    got = ms_aten.generate(lm, ids.numpy(), attention_mask=mask.numpy(),
                           max_new_tokens=12).asnumpy()
    np.testing.assert_array_equal(got, expected)
    for row, prompt in enumerate(prompts):
        alone = _torch(model, prompt, 12)
        np.testing.assert_array_equal(got[row, 7 - prompt.shape[1]:], alone[0])
    assert len(set(got[1, 7:].tolist())) > 3  # the test can tell a wrong mask


def test_greedy_with_the_decoding_controls_equals_transformers(model_and_lm, mode):
    """repetition_penalty, min_new_tokens with a list of end tokens (one that the plain greedy
    sequence emits early, so holding it back shows), pad_token_id after a row finishes."""
    model, lm = model_and_lm
    set_mode(mode)
    ids, mask = _left_padded(_prompts(5, 8, seed=3))
    controls = {"repetition_penalty": 1.4, "attention_mask": mask}
    plain = _torch(model, ids, 14, **controls)
    assert not np.array_equal(plain, _torch(model, ids, 14, attention_mask=mask))
    eos = [int(plain[0, 8 + 1]), int(plain[1, 8 + 4])]
    controls.update(eos_token_id=eos, min_new_tokens=3, pad_token_id=VOCAB - 1)
    expected = _torch(model, ids, 14, **controls)
    got = ms_aten.generate(lm, ids.numpy(), max_new_tokens=14,
                           **{**controls, "attention_mask": mask.numpy()}).asnumpy()
    np.testing.assert_array_equal(got, expected)
    assert (got[:, 8:11] != VOCAB - 1).all() and (got == VOCAB - 1).any()


def _allowed(logits: np.ndarray, temperature: float, min_p: float) -> set[int]:
    """The tokens min-p keeps from one row of logits (transformers' MinPLogitsWarper)."""
    scores = logits.astype(np.float64) / temperature
    probs = np.exp(scores - scores.max())
    # a margin for float32 against float64 at the boundary
    return set(np.flatnonzero(probs >= min_p * probs.max() - 1e-6).tolist())


def test_num_return_sequences_samples_reproducibly_within_min_p(model_and_lm, mode):
    _, lm = model_and_lm
    set_mode(mode)
    prompt = _prompts(4, seed=4)[0].numpy()
    options = {"do_sample": True, "num_return_sequences": 2, "temperature": 1.3, "top_k": 0,
               "min_p": 0.2, "max_new_tokens": 12}
    out = ms_aten.generate(lm, prompt, seed=5, output_logits=True, **options)
    again = ms_aten.generate(lm, prompt, seed=5, output_logits=True, **options).sequences
    other = ms_aten.generate(lm, prompt, seed=6, output_logits=True, **options).sequences
    sequences = out.sequences.asnumpy()
    np.testing.assert_array_equal(sequences, again.asnumpy())
    assert not np.array_equal(sequences, other.asnumpy())
    assert (sequences[:, :4] == prompt).all() and not np.array_equal(*sequences[:, 4:])
    for step, logits in enumerate(out.logits):
        for row, token in enumerate(sequences[:, 4 + step]):
            assert token in _allowed(logits.asnumpy()[row], 1.3, 0.2), (step, row)


class Recorder:
    """A streamer as transformers' protocol has it: each `put` and the `end`."""

    def __init__(self) -> None:
        self.puts: list[np.ndarray] = []
        self.ended = 0

    def put(self, value: torch.Tensor) -> None:
        assert not self.ended
        self.puts.append(value.numpy().copy())

    def end(self) -> None:
        self.ended += 1


def test_a_streamer_gets_what_transformers_gives_it(model_and_lm, mode):
    """The prompt, then each step's tokens, then end(), in both modes (GRAPH: a compiled step
    per token); a row that finishes early gets pad tokens, and the loop stops when all do."""
    model, lm = model_and_lm
    set_mode(mode)
    ids, mask = _left_padded(_prompts(6, 4, seed=6))
    eos = int(_torch(model, ids, 9, attention_mask=mask)[0, -1])
    options = {"attention_mask": mask, "eos_token_id": eos, "pad_token_id": PAD}
    expected = Recorder()
    sequences = _torch(model, ids, 14, streamer=expected, **options)
    got = Recorder()
    out = ms_aten.generate(lm, ids.numpy(), max_new_tokens=14, streamer=got, output_logits=True,
                           **{**options, "attention_mask": mask.numpy()})
    np.testing.assert_array_equal(out.sequences.asnumpy(), sequences)
    assert got.ended == expected.ended == 1 and len(got.puts) == len(expected.puts)
    for mine, theirs in zip(got.puts, expected.puts, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert len(out.logits) == len(got.puts) - 1
    chosen = np.stack([x.asnumpy().argmax(-1) for x in out.logits], 1)  # the raw logits'
    new = sequences[:, 6:]
    assert (new == PAD).any() and (chosen == new)[new != PAD].all()


def test_what_generate_does_not_take_is_refused_by_name(model_and_lm, mode):
    model, lm = model_and_lm
    set_mode(mode)
    ids, mask = _left_padded(_prompts(5, 3, seed=7))
    ids, mask = ids.numpy(), mask.numpy()
    for unsupported in ({"typical_p": 0.5}, {"no_repeat_ngram_size": 2}):
        name = next(iter(unsupported))
        with pytest.raises(TypeError, match=rf"does not support {name}=.*; it takes "
                                            rf"attention_mask, max_new_tokens, do_sample"):
            ms_aten.generate(lm, ids, attention_mask=mask, max_new_tokens=4, **unsupported)
    with pytest.raises(ValueError, match=r"2 prompts with num_beams=3 need 6 cache rows, but "
                                         r"the cache holds batch_size=2"):
        ms_aten.generate(lm, ids, attention_mask=mask, max_new_tokens=4, num_beams=3)
    right = mask[:, ::-1].copy()
    with pytest.raises(ValueError, match=r"attention_mask row 1 is not left padding"):
        ms_aten.generate(lm, ids, attention_mask=right, max_new_tokens=4)
    with pytest.raises(ValueError, match=r"attention_mask has shape \[2, 4\], but input_ids "
                                         r"has \[2, 5\]"):
        ms_aten.generate(lm, ids, attention_mask=mask[:, 1:], max_new_tokens=4)
    with pytest.raises(ValueError, match=r"num_return_sequences=2 needs do_sample=True"):
        ms_aten.generate(lm, ids[:1], max_new_tokens=4, num_return_sequences=2)
    with pytest.raises(ValueError, match=r"2 prompts with num_return_sequences=2 make 4 "
                                         r"sequences, but the cache holds batch_size=2"):
        ms_aten.generate(lm, ids, max_new_tokens=4, num_return_sequences=2, do_sample=True)
    with pytest.raises(ValueError, match=r"attention_mask has shape \[2, 4\], but it masks the "
                                         r"batch's cache positions 0 to cache_position\[-1\] = "
                                         r"4: shape \[2, 5\]"):
        lm(ms.Tensor(ids), ms.Tensor(np.arange(5)), ms.Tensor(mask[:, 1:]))
    # decoding goes on, in GRAPH mode in the same compiled graphs
    np.testing.assert_array_equal(
        ms_aten.generate(lm, ids, attention_mask=mask, max_new_tokens=6).asnumpy(),
        _torch(model, torch.from_numpy(ids), 6, attention_mask=torch.from_numpy(mask)))
