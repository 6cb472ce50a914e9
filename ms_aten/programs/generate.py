"""ms_aten.generate: greedy or sampled decoding over a ms_aten.causal_lm Cell, with the argument
names of transformers' generate; in GRAPH mode the whole loop (prompt, every token, sampling)
is one compiled graph."""
from __future__ import annotations

from typing import NamedTuple

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from .causal_lm import CausalLM
from .decode_checks import check_sampling, check_tokens

_LOOPS = "_ms_aten_decode_loops"


class GenerateOutput(NamedTuple):
    """generate(..., output_logits=True)'s answer, as transformers' `return_dict_in_generate`:
    the tokens, and the raw logits each new token was chosen from, (batch, vocab) per step."""

    sequences: Tensor
    logits: tuple[Tensor, ...]


class DecodeLoop(nn.Cell):
    """The decoding loop as a Cell: the prompt in one call of the model, then one call per
    token in a `while` over tensors, so that GRAPH mode compiles it all once (for every prompt
    length and max_new_tokens) and PYNATIVE runs the same code eagerly.

    Its inputs are tensors, so that changing them compiles nothing: the prompt and its
    positions, the number of new tokens, one uniform draw per step and sequence (numpy's seeded
    generator makes them on the host, the same in both modes), temperature, top_k, top_p, and
    the end and pad tokens (-1: none). Returns the new tokens (batch, max_cache_len), how many
    were made, and, with `output_logits`, the logits each came from (max_cache_len, batch,
    vocab)."""

    def __init__(self, lm: CausalLM, do_sample: bool, output_logits: bool):
        super().__init__()
        self.lm = lm
        self.do_sample = do_sample
        self.output_logits = output_logits
        self.max_len = lm.max_cache_len
        self.set_inputs(Tensor(shape=[lm.batch_size, None], dtype=ms.int64),
                        Tensor(shape=[None], dtype=ms.int64),
                        *(Tensor(shape=shape, dtype=dtype) for shape, dtype in [
                            ([], ms.int64), ([lm.max_cache_len, lm.batch_size], ms.float32),
                            ([], ms.float32), ([], ms.int64), ([], ms.float32),
                            ([], ms.int64), ([], ms.int64)]))

    def construct(self, input_ids, positions, steps, draws, temperature, top_k, top_p, eos, pad):
        # The program's `attended` input (the cache prefix the step reads, positions 0 to the
        # last written) grows by a position per token: the Cell's own slice by value would stop
        # the graph to read the position at every token. The prompt is at positions 0..n-1.
        attended = positions
        logits = self.lm(input_ids, positions, attended)[:, -1]
        batch = logits.shape[0]
        tokens = ops.zeros((batch, self.max_len), ms.int64)
        seen = ops.zeros((self.max_len if self.output_logits else 1, *logits.shape),
                         logits.dtype)
        finished = ops.zeros((batch,), ms.bool_)
        position = positions[-1:] + 1
        i = Tensor(0, ms.int64)
        token, finished = self.choose(logits, draws[i], temperature, top_k, top_p, eos, pad,
                                      finished)
        tokens[:, i] = token
        if self.output_logits:
            seen[i] = logits
        i = i + 1
        while i < steps and not finished.all():
            attended = ops.concat((attended, position))
            logits = self.lm(token.reshape(batch, 1), position, attended)[:, -1]
            token, finished = self.choose(logits, draws[i], temperature, top_k, top_p, eos,
                                          pad, finished)
            tokens[:, i] = token
            if self.output_logits:
                seen[i] = logits
            position = position + 1
            i = i + 1
        return tokens, i, seen

    def choose(self, logits, draw, temperature, top_k, top_p, eos, pad, finished):
        """The next token of each sequence, and which sequences are finished after it."""
        if self.do_sample:
            token = sample(logits, draw, temperature, top_k, top_p)
        else:
            token = ops.argmax(logits, -1)
        token = ops.where(finished, pad, token)
        return token, ops.logical_or(finished, token == eos)


def sample(logits, draw, temperature, top_k, top_p):
    """One token per row of `logits` (batch, vocab), as transformers' warpers choose it:
    temperature, then top-k (ties with the k-th kept), then top-p (the likeliest tokens whose
    probability reaches top_p, at least one), then the token where `draw` (batch,), uniform in
    [0, 1), falls in the cumulative probabilities. Works in the sorted order, mapped back at
    the end."""
    scores, order = ops.sort(logits / temperature, axis=-1, descending=True)
    last = ops.minimum(top_k, scores.shape[-1]) - 1  # top_k past the vocabulary keeps it all
    kth = ops.gather_elements(scores, 1, ops.broadcast_to(last.reshape(1, 1),
                                                          (scores.shape[0], 1)))
    scores = ops.where(scores < kth, float("-inf"), scores)
    probs = ops.softmax(scores, -1)
    # A token stays if the likelier ones before it hold less than top_p.
    probs = ops.where(ops.cumsum(probs, -1) - probs < top_p, probs, 0.0)
    # Inverse CDF over what is kept: a draw in [0, total) lands on a kept token, rounding or not.
    cumulative = ops.cumsum(probs, -1)
    rank = (cumulative <= draw.reshape(-1, 1) * cumulative[:, -1:]).sum(-1).astype(ms.int64)
    return ops.gather_elements(order, 1, rank.reshape(-1, 1)).reshape(-1)


def generate(lm: CausalLM, input_ids: Tensor | np.ndarray, *, max_new_tokens: int,
             do_sample: bool = False, temperature: float = 1.0, top_k: int | None = 50,
             top_p: float = 1.0, eos_token_id: int | None = None,
             pad_token_id: int | None = None, seed: int | None = None,
             output_logits: bool = False) -> Tensor | GenerateOutput:
    """The prompt `input_ids` (batch, length) and up to `max_new_tokens` tokens after it, as
    transformers' model.generate: the prompt runs in one call (prefill), then one call per
    token, at the cache positions the loop counts. Greedy (argmax) unless `do_sample`, which
    samples from softmax(logits / temperature) restricted to the `top_k` likeliest tokens and to
    the smallest set of them whose probability reaches `top_p`, drawing from numpy's generator
    seeded by `seed` (the same seed, the same tokens; None: a fresh one). A sequence that emits
    `eos_token_id` is finished: later tokens are `pad_token_id` (default: eos_token_id), and
    the loop stops when every sequence is. In GRAPH mode the whole loop is one compiled graph
    (DecodeLoop), compiled once per Cell, do_sample and output_logits.

    Refused before anything runs: a batch size other than the cache's, and a prompt with
    max_new_tokens that needs more positions than max_cache_len."""
    if not isinstance(lm, CausalLM):
        raise TypeError(f"ms_aten.generate expects a ms_aten.causal_lm Cell, "
                        f"got {type(lm).__name__}")
    ids = input_ids.asnumpy() if isinstance(input_ids, Tensor) else np.asarray(input_ids)
    _check(lm, ids, max_new_tokens, temperature, top_k, top_p)
    # Per Cell and kind, the loop already made (GRAPH mode compiles each once), kept by the Cell
    # (not a sub-Cell of it): a loop holds its Cell, and a table outside it kept both alive.
    loops: dict[tuple[bool, bool], DecodeLoop] = lm.__dict__.setdefault(_LOOPS, {})
    loop = loops.get((do_sample, output_logits))
    if loop is None:
        loop = loops[(do_sample, output_logits)] = DecodeLoop(lm, do_sample, output_logits)
    batch, length = ids.shape
    draws = np.zeros((lm.max_cache_len, batch), np.float32)
    if do_sample:
        draws[:max_new_tokens] = np.random.default_rng(seed).random((max_new_tokens, batch))
    tokens, count, seen = loop(
        Tensor(ids.astype(np.int64)), Tensor(np.arange(length, dtype=np.int64)),
        Tensor(max_new_tokens, ms.int64), Tensor(draws), Tensor(temperature, ms.float32),
        Tensor(np.iinfo(np.int64).max if top_k is None else top_k, ms.int64),
        Tensor(top_p, ms.float32),
        Tensor(-1 if eos_token_id is None else eos_token_id, ms.int64),
        Tensor(_pad(eos_token_id, pad_token_id), ms.int64))
    made = int(count.asnumpy())
    sequences = Tensor(np.concatenate([ids.astype(np.int64), tokens.asnumpy()[:, :made]], 1))
    if not output_logits:
        return sequences
    return GenerateOutput(sequences, tuple(seen[i] for i in range(made)))


def _pad(eos_token_id: int | None, pad_token_id: int | None) -> int:
    if pad_token_id is not None:
        return pad_token_id
    return -1 if eos_token_id is None else eos_token_id


def _check(lm: CausalLM, ids: np.ndarray, max_new_tokens: int, temperature: float,
           top_k: int | None, top_p: float) -> None:
    if ids.ndim != 2 or ids.shape[1] == 0 or ids.dtype.kind not in "iu":
        raise ValueError(f"ms_aten.generate: input_ids must be integer tokens of shape (batch, "
                         f"length >= 1), got {ids.dtype}{list(ids.shape)}")
    if ids.shape[0] != lm.batch_size:
        raise ValueError(f"ms_aten.generate: input_ids has batch size {ids.shape[0]}, but the "
                         f"cache holds batch_size={lm.batch_size} (fixed when the cell was made)")
    if max_new_tokens < 1:
        raise ValueError(f"ms_aten.generate: max_new_tokens must be at least 1, "
                         f"got {max_new_tokens}")
    # The last new token is never fed back: a prompt of n and k new tokens write n + k - 1.
    needed = ids.shape[1] + max_new_tokens - 1
    if needed > lm.max_cache_len:
        raise ValueError(f"ms_aten.generate: a prompt of {ids.shape[1]} tokens and "
                         f"max_new_tokens={max_new_tokens} need {needed} cache positions, past "
                         f"max_cache_len={lm.max_cache_len}")
    check_tokens("ms_aten.generate", ids, lm.vocab_size)
    check_sampling("ms_aten.generate", temperature, top_k, top_p)
