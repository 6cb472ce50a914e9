"""What ms_aten.generate's loop does to a step's logits before it picks a token, as
transformers' logits processors and warpers do it and in their order: the repetition penalty,
the end tokens held back until min_length / min_new_tokens, then, when sampling, temperature,
top-k, top-p and min-p. MindSpore ops over (batch, vocab) rows, the same code in the one-graph
GRAPH loop and in a loop of steps; every control is a tensor, so that changing one compiles
nothing."""
from __future__ import annotations

from typing import NamedTuple

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops


class Controls(NamedTuple):
    """The loop's controls as tensors, in the order the decoding Cells take them."""

    temperature: Tensor  # float32
    top_k: Tensor  # int64; the vocabulary's size or more keeps every token
    top_p: Tensor  # float32; 1: every token
    min_p: Tensor  # float32; 0: every token
    repetition_penalty: Tensor  # float32; 1: none
    min_new: Tensor  # int64: how many new tokens come before an end token may
    eos: Tensor  # bool (vocab,): the end tokens
    pad: Tensor  # int64: a finished row's later tokens (-1: none can finish)


def held_back(prompt_length: int, min_length: int, min_new_tokens: int,
              eos_token_id: list[int]) -> int:
    """How many new tokens come before an end token may, from model.generate's min_length
    (which counts the prompt) and min_new_tokens; as transformers, none without an end token."""
    return max(min_new_tokens, min_length - prompt_length) if eos_token_id else 0


def controls(vocab_size: int, *, temperature: float, top_k: int | None, top_p: float,
             min_p: float | None, repetition_penalty: float, min_new: int,
             eos_token_id: list[int], pad_token_id: int) -> Controls:
    """The controls, from generate's arguments (checked by the caller) with model.generate's
    meanings: top_k None or 0 and min_p None switch them off; `min_new` from held_back."""
    eos = np.zeros(vocab_size, np.bool_)
    eos[eos_token_id] = True
    return Controls(Tensor(temperature, ms.float32),
                    Tensor(top_k or np.iinfo(np.int64).max, ms.int64),
                    Tensor(top_p, ms.float32), Tensor(min_p or 0.0, ms.float32),
                    Tensor(repetition_penalty, ms.float32), Tensor(min_new, ms.int64),
                    Tensor(eos), Tensor(pad_token_id, ms.int64))


def seen_tokens(ids: np.ndarray, mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """(batch, vocab) bool: the tokens each row's prompt holds, its padding left out (what
    transformers' repetition penalty counts, with `prompt_ignore_length`)."""
    seen = np.zeros((ids.shape[0], vocab_size), np.bool_)
    rows = np.broadcast_to(np.arange(ids.shape[0])[:, None], ids.shape)
    kept = mask.astype(np.bool_)
    seen[rows[kept], ids[kept]] = True
    return seen


# logits_to_keep of the last position. Made once: PYNATIVE mode's ops.full takes 0.76 ms.
_LAST = Tensor(np.array([-1], np.int64))


def last_logits(lm, input_ids, positions, mask, weights=None):
    """The model's step (a ms_aten.causal_lm Cell) over the new tokens, and the last
    position's logits (batch, vocab) in float32 (transformers chooses in float32 whatever the
    model's dtype). The Cell makes that position's logits only (logits_to_keep), as
    model.generate asks the model for, and its (batch, 1, vocab) answer is reshaped, not
    sliced (MindSpore 2.10's CPU StridedSlice with a dropped axis took 30 ms in GRAPH mode on
    GPT-2's (16, 1, 50257) logits). With `weights`, `lm` is the Cell's program over weights
    given (causal_lm.ProgramStep), which takes them first."""
    if weights is None:
        logits = lm(input_ids, positions, mask, _LAST)
    else:
        logits = lm(weights, input_ids, positions, mask, _LAST)
    return logits.astype(ms.float32).reshape(logits.shape[0], logits.shape[2])


def penalize(logits, seen, i, repetition_penalty, min_new, eos):
    """The logits (batch, vocab) after the repetition penalty (a seen token's logit divided by
    the penalty, or multiplied where negative) and, while `i` < min_new new tokens are made,
    -inf on the end tokens."""
    penalized = ops.where(logits < 0, logits * repetition_penalty, logits / repetition_penalty)
    scores = ops.where(seen, penalized, logits)
    return ops.where(ops.logical_and(eos, i < min_new), float("-inf"), scores)


def mark(seen, token):
    """`seen` (batch, vocab) with each row's new token (batch,) in it."""
    vocab = ops.arange(seen.shape[-1], dtype=token.dtype)
    return ops.logical_or(seen, vocab.reshape(1, -1) == token.reshape(-1, 1))


# The largest float32 below 1.0: the top of the draws' range, [0, 1) in the loop's dtype.
_BELOW_ONE = np.nextafter(np.float32(1.0), np.float32(0.0))


def uniform_draws(seed: int | None, shape: tuple[int, ...]) -> np.ndarray:
    """The sampling loop's uniform draws, float32 in [0, 1), from numpy's generator seeded by
    `seed`. numpy draws in float64; rounded to float32, a draw within 2**-25 of 1.0 becomes 1.0
    itself, which is held to the largest float32 below it (a seed's draws stay numpy's)."""
    return np.minimum(np.random.default_rng(seed).random(shape).astype(np.float32), _BELOW_ONE)


def sample(scores, draw, temperature, top_k, top_p, min_p):
    """One token per row of `scores` (batch, vocab), as transformers' warpers choose it:
    temperature, then top-k (ties with the k-th kept), then top-p (the likeliest tokens whose
    probability reaches top_p, at least one), then min-p (those at least min_p times as likely
    as the likeliest), then the token where `draw` (batch,), uniform in [0, 1), falls in the
    cumulative probabilities. Works in the sorted order, mapped back at the end."""
    scores, order = ops.sort(scores / temperature, axis=-1, descending=True)
    last = ops.minimum(top_k, scores.shape[-1]) - 1  # top_k past the vocabulary keeps it all
    kth = ops.gather_elements(scores, 1, ops.broadcast_to(last.reshape(1, 1),
                                                          (scores.shape[0], 1)))
    scores = ops.where(scores < kth, float("-inf"), scores)
    probs = ops.softmax(scores, -1)
    # A token stays if the likelier ones before it hold less than top_p.
    probs = ops.where(ops.cumsum(probs, -1) - probs < top_p, probs, 0.0)
    # The likeliest (first) always stays; the ratio needs no renormalization.
    probs = ops.where(probs >= min_p * probs[:, :1], probs, 0.0)
    # Inverse CDF over what is kept: a draw in [0, total) lands on a kept token. draw * total
    # may round up to total itself (a draw just below 1), which every token's cumulative
    # reaches: the rank is then held to the last kept token (kept tokens lead the sorted
    # order), never past the vocabulary.
    cumulative = ops.cumsum(probs, -1)
    rank = (cumulative <= draw.reshape(-1, 1) * cumulative[:, -1:]).sum(-1).astype(ms.int64)
    last_kept = (probs > 0).sum(-1).astype(ms.int64) - 1
    rank = ops.minimum(rank, last_kept)
    return ops.gather_elements(order, 1, rank.reshape(-1, 1)).reshape(-1)
