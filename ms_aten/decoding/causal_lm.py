"""ms_aten.causal_lm: a HuggingFace causal language model with a static KV cache as one Cell,
whose program serves the prompt (prefill) and each new token (decode)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import mindspore as ms
import numpy as np
import torch
from mindspore import Tensor, nn, ops
from torch.export import Dim, ExportedProgram

from ..programs.base import CaptureError
from ..programs.capture.structure import LEAVES, build
from ..programs.module import TorchModule
from ..programs.runtime.cell import call
from . import grouped_attention, onednn_linear
from .checks import check_tokens

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class CausalLM(TorchModule):
    """`cell(input_ids, cache_position, attention_mask=None, logits_to_keep=0)` -> logits
    (batch, kept positions, vocab): the model's forward over transformers' StaticCache
    (`TorchExportableModuleWithStaticCache`, the cache ExecuTorch exports), its keys and values
    non-trainable Parameters the program writes at `cache_position`. One capture, with the
    sequence dim dynamic from 1 to max_cache_len, runs the prompt and every later token; the
    cache needs no reset between generations, since the positions say where to write and which
    entries to attend to. The attention reads the cache's first `cache_position[-1] + 1`
    positions only (static_cache.PrefixLayer), and the program's third input, transformers' 2D
    attention mask over those positions, has that length: its zeros mask left padding (the keys
    of a shorter prompt's pad tokens, in the prompt's call and in every later one) and set each
    row's position ids. Without a mask, all ones: made on the host for a call from Python;
    inside another graph given by the caller (ms_aten.generate's loop), or else sliced by the
    position's value, which GRAPH mode stops the graph to read. `logits_to_keep`, transformers'
    argument: 0 (every position's logits), k (the last k), or a 1-D int64 Tensor of positions
    (negative from the end); only those positions' hidden states are projected onto the
    vocabulary, so a prompt's call in ms_aten.generate, which keeps the last, does not pay for
    the others' logits.

    Refused before the program runs, in both modes: an input that is not a MindSpore Tensor of
    the program's rank and dtype, a batch size other than the cache's, a token outside the
    vocabulary, a cache position outside [0, max_cache_len) (in GRAPH mode a kernel's error
    would leave the compiled graph unable to run again), a mask of another shape than
    (batch, cache_position[-1] + 1), and a logits_to_keep that is negative or holds a position
    outside input_ids.

    `compile=True`: the step runs as code AOTInductor compiled (programs/compile/compiled.py),
    one library for every sequence length, which writes the cache's new rows in place itself.

    Grouped-query attention reads the cache's key/value heads as they are (SDPA's enable_gqa,
    grouped_attention.py) instead of transformers' repeat_kv copies; `grouped_attentions`
    counts the attentions rewritten in the latest capture.

    `linear_kernel="onednn"`: the float32 linears of a million weights or more run on oneDNN's
    inner product (onednn_linear.py: faster at small batches, logits equal ATen's to rounding);
    `onednn_linears` counts them in the latest capture.
    """

    # Decoding is never differentiated: the forward keeps no autograd graph (a GRAPH kernel's
    # first launch would otherwise park the prompt's activations until its next launch, since
    # the cache's bookkeeping buffers make the forward one a backward could not recompute); a
    # gradient through the Cell is refused, naming those buffers.
    _record = False
    # What its _rewrite counts, kept with a stored capture (programs/stored/).
    _stored_counts = ("grouped_attentions", "onednn_linears")

    def __init__(self, model: PreTrainedModel, max_cache_len: int, batch_size: int = 1, *,
                 compile: bool | Mapping[str, Any] = False, linear_kernel: str = "aten"):
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

        from .served import check_cache, check_model
        from .static_cache import StaticCacheLM

        where = f"ms_aten.causal_lm({type(model).__name__})"
        if max_cache_len < 3 or batch_size < 1:
            raise ValueError(f"ms_aten.causal_lm: max_cache_len must be at least 3 and "
                             f"batch_size at least 1; got {max_cache_len}, {batch_size}")
        if linear_kernel not in onednn_linear.KERNELS:
            raise ValueError(f"ms_aten.causal_lm: linear_kernel must be one of "
                             f"{onednn_linear.KERNELS}, got {linear_kernel!r}")
        if linear_kernel == "onednn" and not onednn_linear.available():
            raise ValueError("ms_aten.causal_lm: linear_kernel='onednn' needs torch built with "
                             "oneDNN (torch.backends.mkldnn.is_available() is False)")
        # Read by _rewrite during the capture that TorchModule.__init__ makes.
        self._linear_kernel = linear_kernel
        self.onednn_linears = 0
        self.grouped_attentions = 0
        check_model(model, where)
        check_cache(model, where)
        # The wrapper insists on a static cache in the generation config; the user's config is
        # put back as it was.
        config = model.generation_config
        saved = config.cache_implementation, config.use_cache
        config.cache_implementation, config.use_cache = "static", True
        try:
            # One position more than the Cell serves, never written: the prefix the attention
            # reads is then never the whole buffer, so the capture need not tell the two apart
            # (torch.matmul's decomposition guards on whether the prefix is contiguous, and
            # eager attentions, GPT-J's, BLOOM's, failed with "Constraints violated").
            wrapper = TorchExportableModuleWithStaticCache(model, batch_size, max_cache_len + 1)
            step = StaticCacheLM(wrapper)
        except CaptureError:
            raise
        except Exception as error:  # noqa: BLE001  (transformers raises many kinds)
            raise CaptureError(f"{where}: {type(model).__name__} is not served: transformers' "
                               f"static cache does not take it ({type(error).__name__}: "
                               f"{error})") from error
        finally:
            config.cache_implementation, config.use_cache = saved
        self.max_cache_len = max_cache_len
        self.batch_size = batch_size
        # The logits' width: the output embedding's rows (the config's vocab_size may differ).
        head = model.get_output_embeddings()
        self.vocab_size = int(head.weight.shape[0]) if head is not None else \
            int(model.config.get_text_config().vocab_size)
        # Inside another graph, a mask without padding is a prefix of these.
        self._ones = Tensor(np.ones((batch_size, max_cache_len), dtype=np.int64))
        seq = Dim("seq", min=1, max=max_cache_len)
        # The wrappers in the model's mode (a new Module is in train mode); the model's
        # submodules keep their own.
        inner = set(model.modules())
        for m in step.modules():
            if m not in inner:
                m.training = model.training
        # Two tokens after one in the cache: an example of size 1 would specialize the sequence
        # dim to 1, and a mask as long as the tokens would make the two dims one symbol.
        # Strict capture: non-strict export sees the cache's tensors (held by StaticCache, not
        # a Module) as constants, and its run_decompositions fails on their writes.
        example = (torch.zeros(batch_size, 2, dtype=torch.long), torch.arange(1, 3),
                   torch.ones(batch_size, 3, dtype=torch.long), torch.arange(2))
        try:
            super().__init__(step, example,
                             dynamic_shapes=({1: seq}, {0: seq},
                                             {1: Dim("attended", min=1, max=max_cache_len)},
                                             {0: Dim("kept", min=1, max=max_cache_len)}),
                             strict=True, compile=compile)
        except CaptureError as error:  # torch's reason, after the architecture's name
            raise CaptureError(f"{where}: {type(model).__name__} is not served: "
                               f"{_not_opaque(error)}") from error
        self._where = where

    def _cache_options(self) -> dict[str, Any]:
        return {"linear_kernel": self._linear_kernel}

    def _rewrite(self, exported: ExportedProgram) -> None:
        self.grouped_attentions = grouped_attention.rewrite(exported.graph_module)
        if self._linear_kernel == "onednn":
            self.onednn_linears = onednn_linear.rewrite(exported.graph_module)

    def check(self, input_ids: Tensor, cache_position: Tensor,
              attention_mask: Tensor | None = None,
              logits_to_keep: int | Tensor = 0) -> None:
        """ValueError, naming the limit, for a batch size other than the cache's, a position
        outside it, a mask of the wrong shape, or logits_to_keep outside the tokens;
        `cell(...)` checks this before every call."""
        self._check(input_ids, _host(cache_position), attention_mask)
        self._kept(input_ids, logits_to_keep)

    def _kept(self, input_ids: Tensor, logits_to_keep: int | Tensor) -> Tensor:
        """logits_to_keep as the program takes it: the positions, a 1-D int64 Tensor."""
        length = int(input_ids.shape[-1])
        if isinstance(logits_to_keep, Tensor):
            kept = _host(logits_to_keep)
            if kept.ndim != 1 or kept.dtype != np.int64 or kept.size == 0:
                raise TypeError(f"{self._where}: logits_to_keep as a Tensor is the positions "
                                f"to keep, 1-D int64 and not empty; got "
                                f"{logits_to_keep.dtype}{list(kept.shape)}")
            if kept.min() < -length or kept.max() >= length:
                raise ValueError(f"{self._where}: logits_to_keep holds position "
                                 f"{int(kept.min() if kept.min() < -length else kept.max())}, "
                                 f"outside input_ids' {length} tokens")
            return logits_to_keep
        if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or \
                logits_to_keep < 0:
            raise ValueError(f"{self._where}: logits_to_keep must be a whole number >= 0 (0: "
                             f"every position, k: the last k) or a Tensor of positions; got "
                             f"{logits_to_keep!r}")
        # As transformers' slice(-k, None): k past the tokens keeps them all.
        first = max(length - logits_to_keep, 0) if logits_to_keep else 0
        return Tensor.from_numpy(np.arange(first, length, dtype=np.int64))

    def _check(self, input_ids: Tensor, positions: np.ndarray,
               attention_mask: Tensor | None) -> None:
        check_tokens(self._where, _host(input_ids), self.vocab_size)
        if len(input_ids.shape) == 2 and input_ids.shape[0] != self.batch_size:
            raise ValueError(f"{self._where}: input_ids has batch size {input_ids.shape[0]}, "
                             f"but the cache holds batch_size={self.batch_size} (fixed when "
                             f"the cell was made)")
        if positions.size == 0:
            raise ValueError(f"{self._where}: cache_position is empty; it gives the cache "
                             f"position of each of input_ids' tokens")
        low, high = int(positions.min()), int(positions.max())
        if low < 0 or high >= self.max_cache_len:
            raise ValueError(f"{self._where}: cache_position {low if low < 0 else high} is "
                             f"outside the cache (max_cache_len={self.max_cache_len}: positions "
                             f"0 to {self.max_cache_len - 1})")
        attended = int(positions.reshape(-1)[-1]) + 1
        if attention_mask is not None and \
                tuple(attention_mask.shape) != (self.batch_size, attended):
            raise ValueError(f"{self._where}: attention_mask has shape "
                             f"{list(attention_mask.shape)}, but it masks the batch's cache "
                             f"positions 0 to cache_position[-1] = {attended - 1}: shape "
                             f"{[self.batch_size, attended]}")

    def __call__(self, input_ids: Tensor, cache_position: Tensor,
                 attention_mask: Tensor | None = None,
                 logits_to_keep: int | Tensor = 0) -> Tensor:
        """`attention_mask`: transformers' 2D mask (batch, cache_position[-1] + 1), int64, 0 on
        left padding; all ones when not given. `logits_to_keep`: 0 (every position), k (the
        last k) or a 1-D int64 Tensor of positions."""
        # Before MindSpore's call, which in GRAPH mode goes straight to the compiled graph;
        # a call from inside another graph (ms_aten.generate's loop) is compiled into it and is
        # not checked here.
        self._check_inputs([input_ids, cache_position], self._where)
        positions = _host(cache_position)
        self._check(input_ids, positions, attention_mask)
        kept = self._kept(input_ids, logits_to_keep)
        if attention_mask is None:
            # Made from the positions the check read: construct's slice by cache_position's
            # value would make a GRAPH-mode call stop mid-graph to read it (about 1 ms per
            # call, a third of a 4-layer GPT-2's decode step).
            attention_mask = Tensor.from_numpy(
                np.ones((self.batch_size, int(positions.reshape(-1)[-1]) + 1), np.int64))
        return build(self._nodes, nn.Cell.__call__(self, input_ids, cache_position,
                                                   attention_mask, kept, **{LEAVES: True}))

    def construct(self, input_ids, cache_position, attention_mask=None, logits_to_keep=None,
                  **kwargs):
        # Defaults for a call inside another graph. Every position: a cumulative sum of ones,
        # which needs no dynamic length's value inside the graph.
        if attention_mask is None:
            attention_mask = self._ones[:, :cache_position[-1] + 1]
        if logits_to_keep is None:
            logits_to_keep = ops.cumsum(ops.ones_like(cache_position), 0) - 1
        return self._outputs(call(self._function, self.weights,
                                  (input_ids, cache_position, attention_mask, logits_to_keep)),
                             kwargs)


# Why what ms_aten.module would run as an opaque torch call is refused here.
_STRICT_ONLY = ("; ms_aten.causal_lm captures the step strictly, as one graph (TorchDynamo: "
                "transformers' static cache needs it), where no part can run as an opaque torch "
                "call as it can in ms_aten.module: a value-dependent branch, a tensor or module "
                "backward hook in the forward are refused (model.generate runs without grad, "
                "where no backward hook fires: a hook kept for training can be removed for "
                "decoding)")


# Why a sequence length the model's code specializes or guards is refused.
_EVERY_LENGTH = ("\n(ms_aten.causal_lm's one capture serves every sequence length from 1 to "
                 "max_cache_len: the model's code must take each of them)")


def _not_opaque(error: CaptureError) -> str:
    """A capture's refusal with the decoding route's reason: for a sequence length the model's
    code does not take, that one capture serves them all; for one ms_aten.module would have met
    with an opaque torch call, why the decoding route cannot (the capture's own advice, to
    capture without strict or narrow dynamic_shapes, is not the caller's to follow here)."""
    if error.kind == "range":
        return error.reason + _EVERY_LENGTH
    if error.kind == "opaque":
        return error.reason + _STRICT_ONLY
    return str(error)


class ProgramStep(nn.Cell):
    """A CausalLM's program as a Cell that takes the weights as its first input and holds none
    of them: `step(weights, input_ids, cache_position, attention_mask, logits_to_keep)`, every
    argument given, as the CausalLM inside another graph, `weights` from weight_inputs. For a
    GRAPH-mode graph with control flow over inputs of dynamic
    shape (ms_aten.generate's DecodeLoop): MindSpore 2.10 keeps such a graph's Parameters after
    its Cell is freed, but not its inputs (docs/capture_cache.md, "Memory")."""

    def __init__(self, lm: CausalLM) -> None:
        super().__init__()
        self.function = lm.primitive
        self.n_outputs = lm.program.n_outputs
        self.nodes = lm._nodes

    def construct(self, weights, input_ids, cache_position, attention_mask, logits_to_keep):
        results = call(self.function, weights,
                       (input_ids, cache_position, attention_mask, logits_to_keep))
        return build(self.nodes, results[:self.n_outputs])


def weight_inputs(lm: CausalLM) -> tuple[Tensor, ...]:
    """ProgramStep's weights: a plain Tensor over each of the Cell's Parameters (its memory,
    not a copy, so the program's writes of the KV cache land in the Parameters), as a
    mutable tuple (an input of the graph, not a constant compiled into it). Made for each call,
    so that a Parameter given new data is read. The cache's Tensors are no Parameters, whose
    writes GRAPH mode would order among other reads (RW_WRITE): in a decoding loop nothing else
    reads them, and each step's call takes the token the one before chose."""
    return ms.mutable(tuple(Tensor(p) for p in lm.weights))


def weight_specs(lm: CausalLM) -> tuple[Tensor, ...]:
    """weight_inputs' shapes and dtypes, for set_inputs."""
    return ms.mutable(tuple(Tensor(shape=list(p.shape), dtype=p.dtype) for p in lm.weights))


def _host(value: Tensor | np.ndarray) -> np.ndarray:
    return value.asnumpy() if isinstance(value, Tensor) else np.asarray(value)


def causal_lm(model: PreTrainedModel, max_cache_len: int, batch_size: int = 1, *,
              compile: bool | Mapping[str, Any] = False,
              linear_kernel: str = "aten") -> CausalLM:
    """A HuggingFace causal LM (GPT-2, Llama, ...: one transformers'
    TorchExportableModuleWithStaticCache takes) as a Cell over a static KV cache of
    `max_cache_len` positions for `batch_size` sequences: `logits = cell(input_ids,
    cache_position, attention_mask=None, logits_to_keep=0)`; see CausalLM, and ms_aten.generate
    for the decoding loop. `compile`: as ms_aten.module's (True, or {"cache_dir": path}): the
    step as compiled code. `linear_kernel`: "aten" (torch's own, the default) or "onednn" (the
    large float32 linears on oneDNN's inner product: faster decoding at small batches, logits
    equal to rounding, so a greedy token may differ from model.generate's at a near tie). A
    model whose cache is not keys and values (Mamba, Qwen3-Next's linear attention), or that
    the capture cannot trace, is refused with a CaptureError naming it and the reason."""
    return CausalLM(model, max_cache_len, batch_size, compile=compile,
                    linear_kernel=linear_kernel)
