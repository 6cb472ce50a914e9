"""Decoding with a static KV cache (ms_aten.causal_lm, ms_aten.generate) against transformers'
model.generate with its default (dynamic) cache: tiny GPT-2 and Llama with grouped-query
attention, random weights, both modes; sampling reproducible and inside its top-k / top-p
sets; bad batch sizes and positions refused before anything runs."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
import transformers
from mindspore import nn

import ms_aten

from common import load_example, set_mode

VOCAB, CACHE = 96, 24


def _gpt2() -> transformers.PreTrainedModel:
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=2,
        initializer_range=0.3, bos_token_id=None, eos_token_id=None)
    return transformers.GPT2LMHeadModel(config)


def _llama() -> transformers.PreTrainedModel:
    config = transformers.LlamaConfig(  # grouped-query attention: 4 query heads share 2 kv
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        initializer_range=0.3, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.LlamaForCausalLM(config)


# The weights' scale (initializer_range) is larger than the default 0.02, so that greedy
# decoding does not settle on one token, and a wrong cache shows.
@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model_and_lm(request) -> tuple[transformers.PreTrainedModel, ms_aten.CausalLM]:
    torch.manual_seed(0)
    model = {"gpt2": _gpt2, "llama": _llama}[request.param]().eval()
    return model, ms_aten.causal_lm(model, max_cache_len=CACHE)


def _prompt(length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


def _torch_greedy(model, prompt: torch.Tensor, new: int, **kwargs) -> np.ndarray:
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=new, do_sample=False,
                              pad_token_id=0, **kwargs).numpy()


def test_greedy_tokens_equal_transformers_generate(model_and_lm, mode):
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(6, seed=1)
    expected = _torch_greedy(model, prompt, 10)
    got = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=10).asnumpy()
    assert got.shape == (1, 16)
    assert len(set(expected[0, 6:].tolist())) > 3  # the test can tell a wrong cache
    np.testing.assert_array_equal(got, expected)


def test_generations_back_to_back_reuse_the_cache_without_reset(model_and_lm, mode):
    """The positions say where to write and what to attend to: a shorter generation after a
    longer one does not see the longer one's entries."""
    model, lm = model_and_lm
    set_mode(mode)
    long, short = _prompt(9, seed=2), _prompt(3, seed=3)
    first = ms_aten.generate(lm, long.numpy(), max_new_tokens=12).asnumpy()
    second = ms_aten.generate(lm, short.numpy(), max_new_tokens=4).asnumpy()
    again = ms_aten.generate(lm, long.numpy(), max_new_tokens=12).asnumpy()
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, _torch_greedy(model, long, 12))
    np.testing.assert_array_equal(second, _torch_greedy(model, short, 4))


def test_a_step_reads_only_the_cache_positions_written_so_far(model_and_lm, mode):
    """The attention reads the cache's prefix up to the last new position, not all of it: NaN
    in every later position of every key and value cache leaves the tokens as transformers'
    (a masked NaN key would still poison softmax's sum, a NaN value the weighted sum)."""
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(5, seed=6)
    caches = [p for p in lm.weights if "key_cache" in p.name or "value_cache" in p.name]
    assert len(caches) == 2 * 2
    for cache in caches:
        cache.set_data(ms.Tensor(np.full(cache.shape, np.nan, np.float32)))
    try:
        got = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=8).asnumpy()
        by_step = lm(ms.Tensor(prompt.numpy()), ms.Tensor(np.arange(5))).asnumpy()
    finally:
        for cache in caches:
            cache.set_data(ms.Tensor(np.zeros(cache.shape, np.float32)))
    np.testing.assert_array_equal(got, _torch_greedy(model, prompt, 8))
    assert np.isfinite(by_step).all()


def test_a_generation_runs_to_the_cache_s_end(model_and_lm, mode):
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(5, seed=4)
    new = CACHE - 5 + 1  # the last token is never written to the cache
    got = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=new).asnumpy()
    np.testing.assert_array_equal(got, _torch_greedy(model, prompt, new))


def test_generation_stops_at_the_end_token(model_and_lm, mode):
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(4, seed=5)
    eos = int(_torch_greedy(model, prompt, 6)[0, -1])  # the greedy sequence's 6th new token
    expected = _torch_greedy(model, prompt, 12, eos_token_id=eos)
    got = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=12, eos_token_id=eos).asnumpy()
    assert got.shape[1] <= 4 + 6 and got[0, -1] == eos
    np.testing.assert_array_equal(got, expected)


def _allowed(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> set[int]:
    """The tokens top-k then top-p keep, from one row of logits (transformers' warpers)."""
    scores = logits.astype(np.float64) / temperature
    kept = np.flatnonzero(scores >= np.sort(scores)[-top_k])
    probs = np.exp(scores[kept] - scores[kept].max())
    probs /= probs.sum()
    order = np.argsort(-probs)
    before = np.cumsum(probs[order]) - probs[order]
    # a margin for float32 against float64 at the top_p boundary
    return set(kept[order[before < top_p + 1e-5]].tolist())


def test_sampling_is_reproducible_and_keeps_to_top_k_and_top_p(model_and_lm, mode):
    _, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(5, seed=6).numpy()
    options = {"do_sample": True, "temperature": 1.5, "top_k": 6, "top_p": 0.8}
    out = ms_aten.generate(lm, prompt, max_new_tokens=14, seed=7, output_logits=True,
                           **options)
    again = ms_aten.generate(lm, prompt, max_new_tokens=14, seed=7, **options)
    np.testing.assert_array_equal(out.sequences.asnumpy(), again.asnumpy())
    tokens = out.sequences.asnumpy()[0, 5:]
    assert len(out.logits) == len(tokens) == 14
    not_argmax = 0
    for step, (token, logits) in enumerate(zip(tokens, out.logits, strict=True)):
        row = logits.asnumpy()[0]
        allowed = _allowed(row, 1.5, 6, 0.8)
        assert token in allowed, f"step {step}: {token} not in {sorted(allowed)}"
        not_argmax += token != row.argmax()
    assert not_argmax > 0  # it samples, not always the likeliest
    other = ms_aten.generate(lm, prompt, max_new_tokens=14, seed=8, **options).asnumpy()
    assert not np.array_equal(other, again.asnumpy())


def test_the_same_seed_samples_the_same_tokens_in_both_modes(model_and_lm):
    """The draws come from numpy's generator on the host, so the mode does not change them."""
    _, lm = model_and_lm
    prompt = _prompt(4, seed=9).numpy()
    sequences = []
    for mode in ("graph", "pynative"):
        set_mode(mode)
        sequences.append(ms_aten.generate(lm, prompt, max_new_tokens=8, do_sample=True,
                                          top_k=None, seed=11).asnumpy())
    np.testing.assert_array_equal(*sequences)


def test_batch_size_and_positions_are_checked_before_anything_runs(model_and_lm, mode):
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(6, seed=1)
    two = np.repeat(prompt.numpy(), 2, axis=0)
    with pytest.raises(ValueError, match=r"input_ids has batch size 2, but the cache holds "
                                         r"batch_size=1"):
        ms_aten.generate(lm, two, max_new_tokens=3)
    with pytest.raises(ValueError, match=r"input_ids has batch size 2, but the cache holds "
                                         r"batch_size=1"):
        lm(ms_aten.to_ms(torch.from_numpy(two)), ms_aten.to_ms(torch.arange(6)))
    with pytest.raises(ValueError, match=rf"a prompt of 6 tokens and max_new_tokens=20 need 25 "
                                         rf"cache positions, past max_cache_len={CACHE}"):
        ms_aten.generate(lm, prompt.numpy(), max_new_tokens=20)
    for position in (CACHE, -1):  # a direct call: in GRAPH mode a kernel error would be fatal
        with pytest.raises(ValueError, match=rf"cache_position {position} is outside the cache "
                                             rf"\(max_cache_len={CACHE}: positions 0 to "
                                             rf"{CACHE - 1}\)"):
            lm(ms_aten.to_ms(prompt[:, :1]), ms_aten.to_ms(torch.tensor([position])))
    with pytest.raises(ValueError, match=r"cache_position is empty"):
        lm(ms_aten.to_ms(prompt[:, :0]), ms_aten.to_ms(torch.arange(0)))
    # the Cell, and its compiled graph in GRAPH mode, still work
    logits = lm(ms_aten.to_ms(prompt), ms_aten.to_ms(torch.arange(6))).asnumpy()
    with torch.no_grad():
        expected = model(prompt).logits.numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(ms_aten.generate(lm, prompt.numpy(), max_new_tokens=10)
                                  .asnumpy(), _torch_greedy(model, prompt, 10))


def test_logits_to_keep_keeps_the_positions_transformers_keeps(model_and_lm, mode):
    """The Cell projects only the kept positions onto the vocabulary, as the model's own
    logits_to_keep does (model.generate's prefill keeps the last; so does ms_aten.generate's);
    a bad one is refused before anything runs, naming it."""
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(6, seed=3)
    positions = ms.Tensor(np.arange(6))
    for keep in (0, 1, 4, 9, ms.Tensor(np.array([0, 2, -1]))):
        got = lm(ms.Tensor(prompt.numpy()), positions, logits_to_keep=keep).asnumpy()
        torch_keep = torch.from_numpy(keep.asnumpy()) if isinstance(keep, ms.Tensor) else keep
        with torch.no_grad():
            expected = model(prompt, logits_to_keep=torch_keep).logits.numpy()
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    where = r"ms_aten.causal_lm\(\w+\)"
    for keep, error, message in [
            (-1, ValueError, "logits_to_keep must be a whole number >= 0 .* got -1"),
            (1.5, ValueError, "logits_to_keep must be a whole number >= 0 .* got 1.5"),
            (ms.Tensor(np.array([6])), ValueError,
             "logits_to_keep holds position 6, outside input_ids' 6 tokens"),
            (ms.Tensor(np.array([-7])), ValueError,
             "logits_to_keep holds position -7, outside input_ids' 6 tokens"),
            (ms.Tensor(np.array([1], np.int32)), TypeError,
             r"logits_to_keep as a Tensor is the positions to keep, 1-D int64 and not empty; "
             r"got Int32\[1\]")]:
        with pytest.raises(error, match=f"{where}: {message}"):
            lm(ms.Tensor(prompt.numpy()), positions, logits_to_keep=keep)
    np.testing.assert_array_equal(ms_aten.generate(lm, prompt.numpy(), max_new_tokens=5)
                                  .asnumpy(), _torch_greedy(model, prompt, 5))


class _NoLogitsToKeep(transformers.GPT2LMHeadModel):
    """A causal LM whose forward takes no logits_to_keep (as a user's own may)."""

    def forward(self, input_ids=None, past_key_values=None, attention_mask=None,
                position_ids=None, use_cache=None, **kwargs):
        return super().forward(input_ids=input_ids, past_key_values=past_key_values,
                               attention_mask=attention_mask, position_ids=position_ids,
                               use_cache=use_cache, **kwargs)


def test_a_model_without_logits_to_keep_has_its_logits_indexed(mode):
    set_mode(mode)
    torch.manual_seed(0)
    model = _NoLogitsToKeep(_gpt2().config).eval()
    lm = ms_aten.causal_lm(model, max_cache_len=12)
    prompt = _prompt(5, seed=4)
    with torch.no_grad():
        expected = model(prompt).logits.numpy()
    for keep, kept in ((0, expected), (2, expected[:, -2:])):
        got = lm(ms.Tensor(prompt.numpy()), ms.Tensor(np.arange(5)), logits_to_keep=keep)
        np.testing.assert_allclose(got.asnumpy(), kept, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(ms_aten.generate(lm, prompt.numpy(), max_new_tokens=6)
                                  .asnumpy(), _torch_greedy(model, prompt, 6))


class LogitSum(nn.Cell):
    def __init__(self, lm: ms_aten.CausalLM):
        super().__init__()
        self.lm = lm

    def construct(self, ids, positions):
        return self.lm(ids, positions).sum()


def test_a_gradient_through_the_cell_is_refused_by_name_and_decoding_goes_on(model_and_lm,
                                                                              mode):
    # The cell keeps no autograd graph, and its cache bookkeeping cannot be recomputed.
    model, lm = model_and_lm
    set_mode(mode)
    ids, positions = ms.Tensor(_prompt(3, seed=5).numpy()), ms.Tensor(np.arange(3))
    with pytest.raises(RuntimeError, match=r"updated its buffers \(.*key_cache_0.*\) in place"):
        ms.value_and_grad(LogitSum(lm), None, lm.trainable_params())(ids, positions)
    prompt = _prompt(5, seed=6)
    tokens = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=4).asnumpy()
    np.testing.assert_array_equal(tokens, _torch_greedy(model, prompt, 4))


class Step(nn.Cell):
    """The Cell called inside a graph of one's own, with the attention mask or without it."""

    def __init__(self, lm: ms_aten.CausalLM):
        super().__init__()
        self.lm = lm

    def construct(self, ids, positions, mask=None):
        if mask is None:
            return self.lm(ids, positions)
        return self.lm(ids, positions, mask)


def test_inside_a_graph_of_one_s_own_the_step_takes_the_mask_or_slices_one(model_and_lm, mode):
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(5, seed=7)
    with torch.no_grad():
        token = model(prompt).logits[:, -1].argmax(-1, keepdim=True)
        expected = model(torch.cat([prompt, token], 1)).logits[:, -1].numpy()
    step = Step(lm)
    for masked in (False, True):
        step(ms.Tensor(prompt.numpy()), ms.Tensor(np.arange(5)),
             *([ms.Tensor(np.ones((1, 5), np.int64))] if masked else []))
        logits = step(ms.Tensor(token.numpy()), ms.Tensor([5]),
                      *([ms.Tensor(np.ones((1, 6), np.int64))] if masked else [])).asnumpy()
        np.testing.assert_allclose(logits[:, -1], expected, rtol=1e-4, atol=1e-4)


def test_the_kv_cache_example_decodes_as_transformers(mode):
    got, expected = load_example("generate_kv_cache").main(["--mode", mode, "--new", "12"])
    assert got.shape == (1, 20)
    np.testing.assert_array_equal(got, expected)


def test_bad_decoding_inputs_are_refused_on_the_host_and_the_cell_goes_on(model_and_lm, mode):
    """In GRAPH mode a token past the embedding table or a NaN temperature failed inside the
    compiled graph, which then refused every later call ("An error occurred in the previous
    step"); they are refused before any graph runs, and input the program cannot take is a
    TypeError naming it, in the same words in both modes."""
    model, lm = model_and_lm
    set_mode(mode)
    prompt = _prompt(4, seed=8)
    where = r"ms_aten.causal_lm\(\w+\)"
    bad = prompt.numpy().copy()
    bad[0, 2] = VOCAB
    with pytest.raises(ValueError, match=rf"ms_aten.generate: input_ids\[0, 2\] is token {VOCAB}, "
                                         rf"outside the vocabulary \(vocab_size={VOCAB}"):
        ms_aten.generate(lm, bad, max_new_tokens=3)
    with pytest.raises(ValueError, match=rf"{where}: input_ids\[0, 2\] is token {VOCAB}"):
        lm(ms.Tensor(bad), ms.Tensor(np.arange(4)))
    for arguments, message in [
            ({"temperature": float("nan")}, "temperature must be finite and > 0, got nan"),
            ({"temperature": 0.0}, "temperature must be finite and > 0, got 0.0"),
            ({"top_p": float("inf")}, r"top_p must be in \(0, 1\], got inf"),
            ({"top_k": -1}, "top_k must be >= 0 or None, got -1"),
            ({"repetition_penalty": float("nan")},
             "repetition_penalty must be finite and > 0, got nan")]:
        with pytest.raises(ValueError, match=f"ms_aten.generate: {message}"):
            ms_aten.generate(lm, prompt.numpy(), max_new_tokens=3, do_sample=True, **arguments)
    with pytest.raises(TypeError, match="top_k must be a whole number >= 0 or None, got float"):
        ms_aten.generate(lm, prompt.numpy(), max_new_tokens=3, do_sample=True, top_k=2.5)
    for ids, got in [(prompt.numpy(), "a numpy.ndarray, where the program takes a MindSpore "
                                      "Tensor"),
                     (ms.Tensor(prompt.numpy()[0]), r"int64\[4\], where the program takes"),
                     (ms.Tensor(prompt.numpy().astype(np.int32)), r"int32\[1, 4\], where the")]:
        with pytest.raises(TypeError, match=rf"{where}: input 'input_ids' is {got}.* "
                                            rf"int64\[1, \?\]"):
            lm(ids, ms.Tensor(np.arange(4)))
    np.testing.assert_array_equal(ms_aten.generate(lm, prompt.numpy(), max_new_tokens=6)
                                  .asnumpy(), _torch_greedy(model, prompt, 6))
    logits = lm(ms.Tensor(prompt.numpy()), ms.Tensor(np.arange(4))).asnumpy()
    with torch.no_grad():
        np.testing.assert_allclose(logits, model(prompt).logits.numpy(), rtol=1e-4, atol=1e-4)


def test_cells_of_one_program_share_a_decode_loop_and_keep_their_own_weights():
    """GRAPH mode compiles one DecodeLoop per program and kind, shared by every Cell of that
    program (MindSpore keeps part of each compiled loop after its Cell goes): each Cell still
    decodes with its own weights and cache, also after the Cell whose primitive the loop runs
    is freed; a Cell of another program gets its own loop."""
    from ms_aten.decoding import generate as decoding

    set_mode("graph")
    models = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        models.append(_gpt2().eval())
    first, second = (ms_aten.causal_lm(model, max_cache_len=CACHE) for model in models)
    prompt = _prompt(5, seed=3)
    for model, lm in [(models[0], first), (models[1], second), (models[0], first)]:
        got = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=6).asnumpy()
        np.testing.assert_array_equal(got, _torch_greedy(model, prompt, 6))
    assert _torch_greedy(models[0], prompt, 6).tolist() != _torch_greedy(models[1], prompt, 6)\
        .tolist(), "the two models must decode differently for the test to show anything"
    loops = [getattr(lm, decoding._LOOPS) for lm in (first, second)]
    assert list(loops[0].values()) == list(loops[1].values())  # the same DecodeLoop object
    del first, loops
    got = ms_aten.generate(second, prompt.numpy(), max_new_tokens=6).asnumpy()
    np.testing.assert_array_equal(got, _torch_greedy(models[1], prompt, 6))
    other = ms_aten.causal_lm(models[1], max_cache_len=CACHE // 2)
    ms_aten.generate(other, prompt.numpy(), max_new_tokens=2)
    assert set(getattr(other, decoding._LOOPS).values()).isdisjoint(
        getattr(second, decoding._LOOPS).values())
