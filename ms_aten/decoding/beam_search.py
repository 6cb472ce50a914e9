"""ms_aten.generate's beam search: transformers' `_beam_search` loop on the host over a
ms_aten.causal_lm Cell whose static cache holds batch * num_beams rows. Each step a compiled
BeamStep gives the last position's logits, transformers' own helpers (GenerationMixin's
`_get_top_k_continuations`, `_update_finished_beams`, ..., pure functions of torch tensors)
and its logits processors and stopping criteria choose the beams, and ReorderCache gathers the
cache's rows by the chosen beams' parents. (Imports transformers, which ms_aten itself does not
need: generate imports this module for num_beams > 1.)"""
from __future__ import annotations

from numbers import Integral, Real
from typing import Any, cast

import mindspore as ms
import numpy as np
import torch
from mindspore import Tensor, nn, ops
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
)
from transformers.generation.stopping_criteria import (
    EosTokenCriteria,
    MaxLengthCriteria,
    StoppingCriteriaList,
)
from transformers.generation.utils import GenerationMixin

from .causal_lm import CausalLM
from .logits_process import last_logits
from .static_cache import StaticCacheLM

# The attribute of a CausalLM that holds its BeamStep and ReorderCache (GRAPH mode compiles
# each once), kept by the Cell as generate's loops are.
_CELLS = "_ms_aten_beam_cells"


class BeamStep(nn.Cell):
    """The model over the new tokens (the prompt, or each beam's last token); the last
    position's logits in float32, as transformers takes them before its log_softmax."""

    def __init__(self, lm: CausalLM):
        super().__init__()
        self.lm = lm
        # The sizes that change between calls unknown: one compile for every step.
        self.set_inputs(Tensor(shape=[lm.batch_size, None], dtype=ms.int64),
                        Tensor(shape=[None], dtype=ms.int64),
                        Tensor(shape=[lm.batch_size, None], dtype=ms.int64))

    def construct(self, input_ids, positions, mask):
        return last_logits(self.lm, input_ids, positions, mask)


class ReorderCache(nn.Cell):
    """Each of the cache's key and value Parameters, (batch * num_beams, heads, positions,
    head dim), gathered along its rows by `rows` (each new beam's parent) and written back:
    what transformers' cache.reorder_cache(beam_idx) does to its tensors."""

    def __init__(self, lm: CausalLM):
        super().__init__()
        self.cache = cache_parameters(lm)

    # One compiled graph in PYNATIVE mode too: op by op, a gather and an assign per tensor
    # cost 5.4 ms a step for a 4-layer Llama here, the graph 1.9 ms.
    @ms.jit
    def construct(self, rows):
        for parameter in self.cache:
            ops.assign(parameter, ops.gather(parameter, rows, 0))
        return rows


def cache_parameters(lm: CausalLM) -> list[ms.Parameter]:
    """The Cell's Parameters that hold the static cache's keys and values (the tensors of its
    layers; not the layers' length counters, which have no batch dim)."""
    step = cast(StaticCacheLM, lm._torch_module)
    tensors = {id(t) for layer in step.layers for t in (layer.keys, layer.values)}
    names = {name for name, t in step.named_buffers() if id(t) in tensors}
    cache = [p for name, p in zip(lm._weight_names, lm.weights, strict=True) if name in names]
    if len(cache) != len(tensors):
        raise RuntimeError(f"ms_aten.generate: found {len(cache)} of the static cache's "
                           f"{len(tensors)} key and value buffers among the Cell's Parameters")
    return cache


def _cells(lm: CausalLM) -> tuple[BeamStep, ReorderCache]:
    cells: tuple[BeamStep, ReorderCache] | None = lm.__dict__.get(_CELLS)
    if cells is None:
        cells = lm.__dict__[_CELLS] = (BeamStep(lm), ReorderCache(lm))
    return cells


def check_beams(lm: CausalLM, ids: np.ndarray, num_beams: int, num_return_sequences: int,
                do_sample: bool, length_penalty: float, early_stopping: bool | str,
                streamer: Any) -> None:
    """ValueError (TypeError for a value of another type) naming what beam search cannot
    take: beam sampling, a streamer (model.generate refuses it too), more sequences than
    beams, an `early_stopping` other than True, False or "never", and a cache whose
    batch_size is not the prompts' count times num_beams."""
    if isinstance(num_beams, bool) or not isinstance(num_beams, Integral) or num_beams < 1:
        raise ValueError(f"ms_aten.generate: num_beams must be a whole number >= 1, got "
                         f"{num_beams!r}")
    if do_sample:
        raise ValueError(f"ms_aten.generate does not support beam sampling (num_beams="
                         f"{num_beams} with do_sample=True): beam search is deterministic here")
    if streamer is not None:
        raise ValueError("ms_aten.generate: a streamer cannot be used with beam search "
                         "(num_beams > 1), as in model.generate")
    if not 1 <= num_return_sequences <= num_beams:
        raise ValueError(f"ms_aten.generate: num_return_sequences={num_return_sequences} "
                         f"must be from 1 to num_beams={num_beams}")
    if not (isinstance(early_stopping, bool) or early_stopping == "never"):
        raise ValueError(f"ms_aten.generate: early_stopping must be True, False or 'never', "
                         f"got {early_stopping!r}")
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, Real):
        raise TypeError(f"ms_aten.generate: length_penalty must be a number, got "
                        f"{type(length_penalty).__name__} {length_penalty!r}")
    if ids.ndim == 2 and len(ids) * num_beams != lm.batch_size:
        raise ValueError(f"ms_aten.generate: {len(ids)} prompts with num_beams={num_beams} "
                         f"need {len(ids) * num_beams} cache rows, but the cache holds "
                         f"batch_size={lm.batch_size}: make the cell with "
                         f"ms_aten.causal_lm(model, max_cache_len, "
                         f"batch_size={len(ids) * num_beams})")


def _processors(ids: np.ndarray, mask: np.ndarray, repetition_penalty: float, min_length: int,
                min_new_tokens: int, eos: list[int]) -> LogitsProcessorList:
    """transformers' processors for these controls, made as its _get_logits_processor makes
    them (in its order, over the prompts already repeated per beam)."""
    processors = LogitsProcessorList()
    if repetition_penalty != 1.0:
        # The left padding is not penalized: each row's count of pad columns.
        padding = torch.from_numpy(mask != 0).int().argmax(dim=1)
        processors.append(RepetitionPenaltyLogitsProcessor(repetition_penalty,
                                                           prompt_ignore_length=padding))
    if eos and min_length > 0:
        processors.append(MinLengthLogitsProcessor(min_length, torch.tensor(eos)))
    if eos and min_new_tokens > 0:
        processors.append(MinNewTokensLengthLogitsProcessor(ids.shape[1], min_new_tokens,
                                                            torch.tensor(eos)))
    return processors


def _criteria(max_length: int, eos: list[int], stop: Any) -> StoppingCriteriaList:
    """transformers' stopping criteria: the length, the stop strings, the end tokens."""
    criteria = StoppingCriteriaList([MaxLengthCriteria(max_length)])
    if stop is not None:
        criteria.append(stop)
    if eos:
        criteria.append(EosTokenCriteria(torch.tensor(eos)))
    return criteria


def beam_search(lm: CausalLM, ids: np.ndarray, mask: np.ndarray, *, num_beams: int,
                max_new_tokens: int, length_penalty: float, early_stopping: bool | str,
                num_return_sequences: int, repetition_penalty: float, min_length: int,
                min_new_tokens: int, eos: list[int], pad: int, stop: Any,
                output_logits: bool) -> tuple[np.ndarray, tuple[Tensor, ...]]:
    """transformers 5.23's `_beam_search` for the prompts `ids` (batch * num_beams, length),
    each repeated num_beams times, with their mask: the best `num_return_sequences` hypotheses
    of each prompt (batch * num_return_sequences, length + the longest's new tokens), and the
    raw logits of the running beams at each step if asked for. The processors run on the
    log-softmax of the logits, and the stopping criteria (the length, the end tokens, `stop`:
    transformers' StopStringCriteria or None) on the candidate sequences, as in
    transformers."""
    processors = _processors(ids, mask, repetition_penalty, min_length, min_new_tokens, eos)
    criteria = _criteria(ids.shape[1] + max_new_tokens, eos, stop)
    step, reorder = _cells(lm)
    helpers: Any = GenerationMixin()  # its beam helpers read no model state
    rows, prompt_len = ids.shape
    batch = rows // num_beams
    max_length = prompt_len + max_new_tokens
    # As transformers: keep enough candidates that num_beams of them do not end.
    beams_to_keep = max(2, 1 + len(eos)) * num_beams
    top_num_beam_mask = torch.arange(beams_to_keep) < num_beams
    # transformers' own precedence: (pad or eos[0]) if there is an end token, else -1.
    fill = (pad or eos[0]) if eos else -1
    running_sequences = torch.full((batch, num_beams, max_length), fill, dtype=torch.int64)
    running_sequences[:, :, :prompt_len] = torch.from_numpy(ids).view(batch, num_beams, -1)
    sequences = running_sequences.clone()
    # Only the first beam's tokens count at the first step: the beams start identical.
    running_beam_scores = torch.zeros((batch, num_beams))
    running_beam_scores[:, 1:] = -1e9
    beam_scores = torch.full((batch, num_beams), -1e9)
    is_sent_finished = torch.zeros((batch, num_beams), dtype=torch.bool)
    unsatisfied = torch.ones((batch, 1), dtype=torch.bool)
    running_beam_indices = torch.full((batch, num_beams, max_new_tokens), -1, dtype=torch.int32)
    beam_indices = running_beam_indices.clone()
    inputs, positions, raw = ids, np.arange(prompt_len, dtype=np.int64), []
    cur_len = prompt_len
    while True:
        logits = step(Tensor(inputs), Tensor(positions), Tensor(mask))
        if output_logits:
            raw.append(logits)
        flat = cast(torch.LongTensor, running_sequences[:, :, :cur_len].reshape(rows, cur_len))
        log_probs = processors(flat, torch.log_softmax(torch.from_numpy(logits.asnumpy()), -1))
        log_probs = (log_probs.view(batch, num_beams, -1) + running_beam_scores[:, :, None]) \
            .view(batch, -1)
        topk_log_probs, topk_running_sequences, topk_running_beam_indices = \
            helpers._get_top_k_continuations(
                accumulated_log_probs=log_probs, running_sequences=running_sequences,
                running_beam_indices=running_beam_indices, cur_len=cur_len,
                decoder_prompt_len=prompt_len, do_sample=False, beams_to_keep=beams_to_keep,
                num_beams=num_beams, batch_size=batch)
        hits = criteria(topk_running_sequences[:, :, :cur_len + 1].reshape(
            batch * beams_to_keep, cur_len + 1), None).view(batch, beams_to_keep)
        running_sequences, running_beam_scores, running_beam_indices = \
            helpers._get_running_beams_for_next_iteration(
                topk_log_probs=topk_log_probs, topk_running_sequences=topk_running_sequences,
                topk_running_beam_indices=topk_running_beam_indices,
                next_token_hits_stopping_criteria=hits, num_beams=num_beams)
        sequences, beam_scores, beam_indices, is_sent_finished = helpers._update_finished_beams(
            sequences=sequences, topk_running_sequences=topk_running_sequences,
            beam_scores=beam_scores, topk_log_probs=topk_log_probs, beam_indices=beam_indices,
            topk_running_beam_indices=topk_running_beam_indices,
            is_early_stop_heuristic_unsatisfied=unsatisfied, is_sent_finished=is_sent_finished,
            next_token_hits_stopping_criteria=hits, top_num_beam_mask=top_num_beam_mask,
            num_beams=num_beams, cur_len=cur_len, decoder_prompt_len=prompt_len,
            length_penalty=length_penalty, early_stopping=early_stopping)
        parents = running_beam_indices[..., cur_len - prompt_len].reshape(rows)
        cur_len += 1
        unsatisfied = helpers._check_early_stop_heuristic(
            is_early_stop_heuristic_unsatisfied=unsatisfied,
            running_beam_scores=running_beam_scores, beam_scores=beam_scores,
            is_sent_finished=is_sent_finished, cur_len=cur_len, max_length=max_length,
            decoder_prompt_len=prompt_len, early_stopping=early_stopping,
            length_penalty=length_penalty)
        if not helpers._beam_search_has_unfinished_sequences(unsatisfied, is_sent_finished,
                                                             hits, early_stopping):
            break
        # The cache's rows follow their beams (transformers reorders after the last step
        # too; nothing reads the cache after it).
        reorder(Tensor(parents.numpy().astype(np.int64)))
        inputs = running_sequences[:, :, cur_len - 1].reshape(rows, 1).numpy()
        positions = np.array([cur_len - 1], np.int64)
        mask = np.concatenate([mask, np.ones((rows, 1), np.int64)], 1)
    chosen = sequences[:, :num_return_sequences].reshape(batch * num_return_sequences, -1)
    indices = beam_indices[:, :num_return_sequences].reshape(batch * num_return_sequences, -1)
    # The longest hypothesis returned sets the width, as in transformers.
    generated = int((indices + 1).bool().sum(1).max())
    return chosen[:, :prompt_len + generated].numpy(), tuple(raw)
