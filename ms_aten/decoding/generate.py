"""ms_aten.generate: greedy, sampled or beam decoding over a ms_aten.causal_lm Cell, of one
prompt or a left-padded batch, with the argument names and meanings of transformers' generate;
in GRAPH mode the whole loop (prompt, every token, sampling) is one compiled graph, or, with a
streamer or stop strings, a compiled step per token (beam search: beam_search.py)."""
from __future__ import annotations

import hashlib
import inspect
from collections import OrderedDict
from typing import Any, NamedTuple

import mindspore as ms
import numpy as np
import torch
from mindspore import Tensor, nn, ops

from . import logits_process
from .causal_lm import CausalLM, ProgramStep, weight_inputs, weight_specs
from .checks import check_sampling, check_tokens
from .logits_process import last_logits, mark, penalize, sample, uniform_draws

# The attribute of a CausalLM that holds its decode loops (_loop).
_LOOPS = "_ms_aten_decode_loops"
# GRAPH-mode DecodeLoops by the program they run and their kind, shared by every CausalLM of
# that program (_shared_loop). The last 16 kept: a loop dropped leaves most of its memory in
# MindSpore anyway, so the bound is on the primitives' programs a kept loop holds (~1 MiB).
_SHARED: OrderedDict[tuple[Any, ...], DecodeLoop] = OrderedDict()
_SHARED_KEPT = 16


class GenerateOutput(NamedTuple):
    """generate(..., output_logits=True)'s answer, as transformers' `return_dict_in_generate`:
    the tokens, and the raw logits each new token was chosen from, (batch, vocab) per step."""

    sequences: Tensor
    logits: tuple[Tensor, ...]


class _Choice(nn.Cell):
    """What a decoding step does after the model: the next token of each row from the last
    position's logits, processed as transformers does (logits_process.py). `penalize`: the
    repetition penalty and the held-back end tokens apply (a step without them leaves the
    (batch, vocab) scores and `seen` alone: their passes cost 40-70 ms a step at batch 16 for
    GPT-2 small's vocabulary, a third of the model's step)."""

    def __init__(self, do_sample: bool, penalize: bool):
        super().__init__()
        self.do_sample = do_sample
        self.penalize = penalize

    def choose(self, logits, i, draw, seen, finished, temperature, top_k, top_p, min_p,
               repetition_penalty, min_new, eos, pad):
        scores = logits
        if self.penalize:
            scores = penalize(logits, seen, i, repetition_penalty, min_new, eos)
        if self.do_sample:
            token = sample(scores, draw, temperature, top_k, top_p, min_p)
        else:
            token = ops.argmax(scores, -1)
        token = ops.where(finished, pad, token)
        finished = ops.logical_or(finished, ops.gather(eos, token, 0))
        if self.penalize:
            seen = mark(seen, token)
        return token, seen, finished, logits


class DecodeStep(_Choice):
    """One step of decoding: the model over the new tokens (the prompt, or each row's last
    token), then the next token of each row (_Choice). Takes and returns the rows' state: which
    tokens each has seen (for the repetition penalty) and which rows are finished; returns the
    token and the raw logits it came from. A finished row's token is the pad token."""

    def __init__(self, lm: CausalLM, do_sample: bool, penalize: bool):
        super().__init__(do_sample, penalize)
        self.lm = lm

    def construct(self, input_ids, positions, mask, i, draw, seen, finished, temperature, top_k,
                  top_p, min_p, repetition_penalty, min_new, eos, pad):
        return self.choose(last_logits(self.lm, input_ids, positions, mask), i, draw, seen,
                           finished, temperature, top_k, top_p, min_p, repetition_penalty,
                           min_new, eos, pad)


class LoopStep(_Choice):
    """DecodeStep inside DecodeLoop, over the weights given as its first input: the model is
    the Cell's program (causal_lm.ProgramStep), not the Cell, so that the loop's graph holds
    none of the Cell's Parameters, which MindSpore 2.10 would keep after the Cell is freed."""

    def __init__(self, lm: CausalLM, do_sample: bool, penalize: bool):
        super().__init__(do_sample, penalize)
        self.program = ProgramStep(lm)

    def construct(self, weights, input_ids, positions, mask, i, draw, seen, finished,
                  temperature, top_k, top_p, min_p, repetition_penalty, min_new, eos, pad):
        return self.choose(last_logits(self.program, input_ids, positions, mask, weights), i,
                           draw, seen, finished, temperature, top_k, top_p, min_p,
                           repetition_penalty, min_new, eos, pad)


def _step_inputs(lm: CausalLM) -> list[Tensor]:
    """DecodeStep's inputs with the sizes that change between calls unknown: one compile."""
    batch = lm.batch_size
    return [Tensor(shape=[batch, None], dtype=ms.int64), Tensor(shape=[None], dtype=ms.int64),
            Tensor(shape=[batch, None], dtype=ms.int64), Tensor(shape=[], dtype=ms.int64),
            Tensor(shape=[batch], dtype=ms.float32),
            Tensor(shape=[batch, lm.vocab_size], dtype=ms.bool_),
            Tensor(shape=[batch], dtype=ms.bool_), *_control_inputs(lm)]


def _control_inputs(lm: CausalLM) -> list[Tensor]:
    return [*(Tensor(shape=[], dtype=dtype) for dtype in (
        ms.float32, ms.int64, ms.float32, ms.float32, ms.float32, ms.int64)),
        Tensor(shape=[lm.vocab_size], dtype=ms.bool_), Tensor(shape=[], dtype=ms.int64)]


class DecodeLoop(nn.Cell):
    """The decoding loop as a Cell: the prompt in one DecodeStep, then one per token in a
    `while` over tensors, so that GRAPH mode compiles it all once (for every prompt length
    and max_new_tokens). (generate runs it in GRAPH mode; in PYNATIVE mode, its loop on the
    host, _stream.)

    Its inputs are tensors, so that changing them compiles nothing: the prompt, its positions
    and its attention mask (0 on left padding; the loop appends a 1 per token, as
    model.generate does), the number of new tokens, one uniform draw per step and sequence
    (numpy's seeded generator makes them on the host, the same in both modes), the tokens each
    prompt holds, the Controls, and the CausalLM's weights (causal_lm.weight_inputs: a graph
    with a `while` over inputs of dynamic shape keeps the Parameters it holds after it is
    freed, MindSpore 2.10; docs/capture_cache.md, "Memory"). Returns the new tokens (batch,
    max_cache_len), how many were made, and, with `output_logits`, the logits each came from
    (max_cache_len, batch, vocab)."""

    def __init__(self, lm: CausalLM, do_sample: bool, output_logits: bool, penalize: bool):
        super().__init__()
        self.step = LoopStep(lm, do_sample, penalize)
        self.output_logits = output_logits
        self.max_len = lm.max_cache_len
        step = _step_inputs(lm)
        self.set_inputs(*step[:3], Tensor(shape=[], dtype=ms.int64),
                        Tensor(shape=[lm.max_cache_len, lm.batch_size], dtype=ms.float32),
                        step[5], *_control_inputs(lm), weight_specs(lm))

    # The controls are spelled out: starred arguments in a GRAPH-mode construct keep the Cell,
    # and the CausalLM it holds, alive for the process's life (MindSpore 2.10; cell.call).
    def construct(self, input_ids, positions, mask, steps, draws, seen, temperature, top_k,
                  top_p, min_p, repetition_penalty, min_new, eos, pad, weights):
        batch = input_ids.shape[0]
        tokens = ops.zeros((batch, self.max_len), ms.int64)
        i = Tensor(0, ms.int64)
        token, seen, finished, logits = self.step(
            weights, input_ids, positions, mask, i, draws[i], seen, ops.zeros((batch,), ms.bool_),
            temperature, top_k, top_p, min_p, repetition_penalty, min_new, eos, pad)
        logged = ops.zeros((self.max_len if self.output_logits else 1, *logits.shape),
                           logits.dtype)
        tokens[:, i] = token
        if self.output_logits:
            logged[i] = logits
        # The mask grows by a column per token (its length is the cache prefix the step
        # reads): the Cell's own slice by value would stop the graph to read the position at
        # every token. The prompt is at positions 0..n-1.
        position = positions[-1:] + 1
        one = ops.ones((batch, 1), mask.dtype)
        i = i + 1
        while i < steps and not finished.all():
            mask = ops.concat((mask, one), 1)
            token, seen, finished, logits = self.step(
                weights, token.reshape(batch, 1), position, mask, i, draws[i], seen, finished,
                temperature, top_k, top_p, min_p, repetition_penalty, min_new, eos, pad)
            tokens[:, i] = token
            if self.output_logits:
                logged[i] = logits
            position = position + 1
            i = i + 1
        return tokens, i, logged


def generate(lm: CausalLM, input_ids: Tensor | np.ndarray, *,
             attention_mask: Tensor | np.ndarray | None = None, max_new_tokens: int,
             do_sample: bool = False, temperature: float = 1.0, top_k: int | None = 50,
             top_p: float = 1.0, min_p: float | None = None, repetition_penalty: float = 1.0,
             min_length: int = 0, min_new_tokens: int | None = None,
             eos_token_id: int | list[int] | None = None, pad_token_id: int | None = None,
             num_return_sequences: int = 1, num_beams: int = 1, length_penalty: float = 1.0,
             early_stopping: bool | str = False, stop_strings: str | list[str] | None = None,
             tokenizer: Any = None, streamer: Any = None, seed: int | None = None,
             output_logits: bool = False, **unsupported: Any) -> Tensor | GenerateOutput:
    """The prompt `input_ids` (batch, length) and up to `max_new_tokens` tokens after it, as
    transformers' model.generate, with its arguments' names and meanings: the prompt runs in
    one call (prefill), then one call per token, at the cache positions the loop counts.

    `attention_mask` (batch, length): transformers' mask of a batch of prompts of different
    lengths, left-padded (0 on the padding; rows of zeros then ones): the padding is masked in
    every step and each row's positions start at its first token, so each row's tokens are
    those of its prompt alone. Greedy (argmax) unless `do_sample`, which samples from
    softmax(logits / temperature) restricted to the `top_k` likeliest tokens (None or 0: all),
    to the smallest set of them whose probability reaches `top_p`, and to those at least
    `min_p` times as likely as the likeliest, drawing from numpy's generator seeded by `seed`
    (the same seed, the same tokens; None: a fresh one). Before either, a token the row holds
    (its prompt's or a new one) has its logit divided by `repetition_penalty` (multiplied where
    negative), and the end tokens are held back until the sequence has `min_length` tokens and
    `min_new_tokens` new ones. A sequence that emits an end token (`eos_token_id`, one or a
    list) is finished: later tokens are `pad_token_id` (default: the first end token), and the
    loop stops when every sequence is. `num_return_sequences` samples that many sequences per
    prompt (the cache's batch_size holds them all). `streamer`: transformers' protocol (a
    TextStreamer), given the prompt, then each step's tokens (`put`), then `end()`.
    `stop_strings` (with the model's `tokenizer`): a row whose text ends with one is finished
    (transformers' StopStringCriteria, read after each token).

    `num_beams` > 1: transformers' beam search (beam_search.py), its `length_penalty`,
    `early_stopping` (True, False or "never") and `num_return_sequences` (the best that many
    hypotheses of each prompt, at most num_beams); the cache holds batch * num_beams rows.

    In GRAPH mode the whole loop is one compiled graph (DecodeLoop), compiled once per Cell,
    do_sample, output_logits and whether a repetition penalty or held-back end token applies;
    with a streamer or stop_strings, a compiled step (DecodeStep)
    called once per token, so that the streamer and the stop strings run between steps; beam
    search is a compiled step and a compiled cache reorder per token. In PYNATIVE mode the
    same DecodeStep runs once per token from a loop on the host.

    Refused before anything runs: an argument of model.generate this function does not take
    (a TypeError naming those it takes), a batch size other than the cache's (times num_beams
    with beams), a mask that is not left padding of input_ids' shape, a prompt with
    max_new_tokens that needs more positions than max_cache_len, stop_strings without a
    tokenizer, and beam sampling (do_sample with num_beams > 1) or a streamer with beams."""
    if not isinstance(lm, CausalLM):
        raise TypeError(f"ms_aten.generate expects a ms_aten.causal_lm Cell, "
                        f"got {type(lm).__name__}")
    _refuse(unsupported)
    ids = _host(input_ids)
    mask = np.ones_like(ids) if attention_mask is None else _host(attention_mask)
    if num_beams != 1:
        from .beam_search import check_beams
        check_beams(lm, ids, num_beams, num_return_sequences, do_sample, length_penalty,
                    early_stopping, streamer)
    elif num_return_sequences != 1:
        _check_copies(lm, ids, num_return_sequences, do_sample)
    copies = num_return_sequences if num_beams == 1 else num_beams
    if copies != 1:
        ids, mask = (np.repeat(a, copies, axis=0) for a in (ids, mask))
    _check(lm, ids, max_new_tokens, temperature, top_k, top_p, repetition_penalty)
    _check_mask(ids, mask)
    _check_new_controls(min_p, min_length, min_new_tokens)
    ids, mask = ids.astype(np.int64), mask.astype(np.int64)
    eos = [] if eos_token_id is None else \
        [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    pad = pad_token_id if pad_token_id is not None else eos[0] if eos else -1
    stop = _stop_strings(stop_strings, tokenizer)
    if num_beams != 1:
        from .beam_search import beam_search
        found, logits = beam_search(
            lm, ids, mask, num_beams=num_beams, max_new_tokens=max_new_tokens,
            length_penalty=length_penalty, early_stopping=early_stopping,
            num_return_sequences=num_return_sequences, repetition_penalty=repetition_penalty,
            min_length=min_length, min_new_tokens=min_new_tokens or 0, eos=eos, pad=pad,
            stop=stop, output_logits=output_logits)
        return GenerateOutput(Tensor(found), logits) if output_logits else Tensor(found)
    batch, length = ids.shape
    min_new = logits_process.held_back(length, min_length, min_new_tokens or 0, eos)
    controls = logits_process.controls(
        lm.vocab_size, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
        repetition_penalty=repetition_penalty, min_new=min_new, eos_token_id=eos,
        pad_token_id=pad)
    seen = logits_process.seen_tokens(ids, mask, lm.vocab_size)
    draws = np.zeros((lm.max_cache_len, batch), np.float32)
    if do_sample:
        draws[:max_new_tokens] = uniform_draws(seed, (max_new_tokens, batch))
    # PYNATIVE mode runs the loop on the host, a DecodeStep per token: DecodeLoop's
    # bookkeeping as PyNative ops (a setitem of the token, the loop's two tests) cost about
    # 3 ms a token, a tenth of GPT-2 small's step.
    stepwise = streamer is not None or stop is not None or \
        ms.get_context("mode") == ms.PYNATIVE_MODE
    loop = _loop(lm, do_sample, output_logits, stepwise,
                 penalize=repetition_penalty != 1.0 or min_new > 0)
    if not stepwise:
        tokens, count, logged = loop(Tensor(ids), Tensor(np.arange(length, dtype=np.int64)),
                                     Tensor(mask), Tensor(max_new_tokens, ms.int64),
                                     Tensor(draws), Tensor(seen), *controls,
                                     weight_inputs(lm))
        made = int(count.asnumpy())
        new = tokens.asnumpy()[:, :made]
        logits = tuple(logged[i] for i in range(made)) if output_logits else ()
    else:
        new, logits = _stream(loop, ids, mask, max_new_tokens, draws, seen, controls, streamer,
                              stop, bool(eos), output_logits)
    sequences = Tensor(np.concatenate([ids, new], 1))
    if not output_logits:
        return sequences
    return GenerateOutput(sequences, logits)


def _loop(lm: CausalLM, do_sample: bool, output_logits: bool, stepwise: bool,
          penalize: bool) -> nn.Cell:
    # Per Cell and kind, the loop already made (GRAPH mode compiles each once), kept by the Cell
    # (not a sub-Cell of it): a loop holds its Cell, and a table outside it kept both alive.
    loops: dict[tuple[bool, bool, bool, bool], nn.Cell] = lm.__dict__.setdefault(_LOOPS, {})
    key = (do_sample, output_logits and not stepwise, stepwise, penalize)
    loop = loops.get(key)
    if loop is None:
        if stepwise:
            loop = DecodeStep(lm, do_sample, penalize)
            loop.set_inputs(*_step_inputs(lm))
        else:
            loop = _shared_loop(lm, do_sample, output_logits, penalize)
        loops[key] = loop
    return loop


def _shared_loop(lm: CausalLM, do_sample: bool, output_logits: bool,
                 penalize: bool) -> DecodeLoop:
    """The DecodeLoop of a CausalLM whose program an earlier Cell ran already: that Cell's loop,
    or a new one. A loop holds no weights (they are its input) and no Cell, only the program's
    primitive, so it serves every Cell of the same program, Parameters, cache and all, given
    through weight_inputs. MindSpore 2.10 keeps part of each compiled loop graph (a `while`
    over inputs of dynamic shape) after its Cell is freed, about 6 MiB for GPT-2 small's 184
    inputs: a Cell made per request or batch would leave that behind each time, and compile
    again (docs/capture_cache.md, "Memory")."""
    program = lm.program
    key = (hashlib.sha256(program.spec.encode()).hexdigest(),
           program.compiled.key if program.compiled is not None else None,
           program.written, program.random, tuple(lm._nodes), lm.batch_size, lm.vocab_size,
           lm.max_cache_len, tuple((tuple(p.shape), p.dtype) for p in lm.weights),
           do_sample, output_logits, penalize)
    loop = _SHARED.get(key)
    if loop is None:
        loop = _SHARED[key] = DecodeLoop(lm, do_sample, output_logits, penalize)
        while len(_SHARED) > _SHARED_KEPT:
            _SHARED.popitem(last=False)
    _SHARED.move_to_end(key)
    return loop


def _stream(step: nn.Cell, ids: np.ndarray, mask: np.ndarray, max_new_tokens: int,
            draws: np.ndarray, seen: np.ndarray, controls: logits_process.Controls,
            streamer: Any, stop: Any, pad_stopped: bool,
            output_logits: bool) -> tuple[np.ndarray, tuple[Tensor, ...]]:
    """DecodeLoop's loop in Python, a DecodeStep per token (PYNATIVE mode's loop, and GRAPH
    mode's with a streamer or stop strings), the streamer, if any, called as model.generate
    calls it: `put` with the prompt, then with each step's tokens (batch,),
    then `end()`; `stop` (transformers' StopStringCriteria) read after each token. A row it
    stops is finished, its later tokens the pad token, when `pad_stopped` (there is an end
    token: transformers pads only then); the loop ends when every row is finished or stopped.
    The new tokens (batch, made), and the raw logits if asked for."""
    if streamer is not None:
        streamer.put(torch.from_numpy(ids))
    batch, length = ids.shape
    inputs, positions = ids, np.arange(length, dtype=np.int64)
    state, finished = Tensor(seen), Tensor(np.zeros(batch, np.bool_))
    stopped = np.zeros(batch, np.bool_)
    sequences, logits = ids, []
    for i in range(max_new_tokens):
        token, state, finished, raw = step(Tensor(inputs), Tensor(positions), Tensor(mask),
                                           Tensor(i, ms.int64), Tensor(draws[i]), state,
                                           finished, *controls)
        chosen, done = token.asnumpy(), finished.asnumpy()
        if streamer is not None:
            streamer.put(torch.from_numpy(chosen))
        sequences = np.concatenate([sequences, chosen[:, None]], 1)
        if output_logits:
            logits.append(raw)
        if stop is not None:
            stopped |= stop(torch.from_numpy(sequences), None).numpy()
            if pad_stopped:
                done = done | stopped
                finished = Tensor(done)
        if (done | stopped).all():
            break
        inputs, positions = chosen.reshape(batch, 1), np.array([length + i], np.int64)
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], 1)
    if streamer is not None:
        streamer.end()
    return sequences[:, length:], tuple(logits)


def _stop_strings(stop_strings: str | list[str] | None, tokenizer: Any) -> Any:
    """transformers' StopStringCriteria for `stop_strings`, None without them; a ValueError
    without a tokenizer, as model.generate raises."""
    if stop_strings is None:
        return None
    if tokenizer is None:
        raise ValueError("ms_aten.generate: stop_strings needs the model's tokenizer, to know "
                         "which tokens make the strings: pass it as tokenizer=, as "
                         "model.generate requires")
    from transformers.generation.stopping_criteria import StopStringCriteria
    return StopStringCriteria(tokenizer, stop_strings)


def _host(array: Tensor | np.ndarray) -> np.ndarray:
    return array.asnumpy() if isinstance(array, Tensor) else np.asarray(array)


def _refuse(unsupported: dict[str, Any]) -> None:
    """TypeError for an argument generate does not take, naming those it takes."""
    if unsupported:
        names = [name for name, parameter in inspect.signature(generate).parameters.items()
                 if parameter.kind is inspect.Parameter.KEYWORD_ONLY]
        what = ", ".join(f"{name}={value!r}" for name, value in unsupported.items())
        raise TypeError(f"ms_aten.generate does not support {what}; it takes "
                        f"{', '.join(names)}")


def _check_copies(lm: CausalLM, ids: np.ndarray, copies: int, do_sample: bool) -> None:
    if not do_sample and copies > 1:
        raise ValueError(f"ms_aten.generate: num_return_sequences={copies} needs do_sample=True "
                         f"(greedy decoding makes one sequence per prompt), as in "
                         f"model.generate")
    if copies < 1 or ids.ndim != 2 or len(ids) * copies != lm.batch_size:
        raise ValueError(f"ms_aten.generate: {len(ids)} prompts with num_return_sequences="
                         f"{copies} make {len(ids) * copies} sequences, but the cache holds "
                         f"batch_size={lm.batch_size} (fixed when the cell was made)")


def _check_mask(ids: np.ndarray, mask: np.ndarray) -> None:
    """The mask must be input_ids' shape, 0 and 1, each row left padding then its prompt."""
    if mask.shape != ids.shape:
        raise ValueError(f"ms_aten.generate: attention_mask has shape {list(mask.shape)}, but "
                         f"input_ids has {list(ids.shape)}")
    if not np.isin(mask, (0, 1)).all():
        raise ValueError("ms_aten.generate: attention_mask must hold 0 (padding) and 1 (a "
                         "token) only")
    bad = np.flatnonzero((np.diff(mask, axis=1) < 0).any(1) | (mask[:, -1] == 0))
    if bad.size:
        raise ValueError(f"ms_aten.generate: attention_mask row {int(bad[0])} is not left "
                         f"padding (zeros, then ones to the end, at least one): pad a batch "
                         f"of prompts on the left (tokenizer.padding_side = 'left'), as "
                         f"decoder-only models need")


def _check_new_controls(min_p: float | None, min_length: int,
                        min_new_tokens: int | None) -> None:
    if (min_p is not None and not 0 <= min_p <= 1) or \
            min_length < 0 or (min_new_tokens is not None and min_new_tokens < 0):
        raise ValueError(f"ms_aten.generate: needs 0 <= min_p <= 1 or None, min_length >= 0 "
                         f"and min_new_tokens >= 0 or None; got {min_p}, {min_length}, "
                         f"{min_new_tokens}")


def _check(lm: CausalLM, ids: np.ndarray, max_new_tokens: int, temperature: float,
           top_k: int | None, top_p: float, repetition_penalty: float) -> None:
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
    check_sampling("ms_aten.generate", temperature, top_k, top_p, repetition_penalty)
