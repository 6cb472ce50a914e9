"""ms_aten.causal_lm: a HuggingFace causal language model with a static KV cache as one Cell,
whose program serves the prompt (prefill) and each new token (decode)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from mindspore import Tensor, nn
from torch.export import Dim

from .cell import call
from .decode_checks import check_tokens
from .module import TorchModule
from .structure import LEAVES, build

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class CausalLM(TorchModule):
    """`cell(input_ids, cache_position)` -> logits (batch, seq, vocab): the model's forward over
    transformers' StaticCache (`TorchExportableModuleWithStaticCache`, the cache ExecuTorch
    exports), its keys and values non-trainable Parameters the program writes at
    `cache_position`. One capture, with the sequence dim dynamic from 1 to max_cache_len, runs
    the prompt and every later token; the cache needs no reset between generations, since the
    positions say where to write and which entries to attend to. The attention reads the
    cache's first `cache_position[-1] + 1` positions only (static_cache.PrefixLayer): the
    program's third input has that length: made on the host for a call from Python; inside
    another graph given by the caller (ms_aten.generate's loop), or else sliced by the
    position's value, which GRAPH mode stops the graph to read.

    Refused before the program runs, in both modes: an input that is not a MindSpore Tensor of
    the program's rank and dtype, a batch size other than the cache's, a token outside the
    vocabulary, and a cache position outside [0, max_cache_len) (in GRAPH mode a kernel's error
    would leave the compiled graph unable to run again).

    `compile=True`: the step runs as code AOTInductor compiled (compiled.py), one library for
    every sequence length, which writes the cache's new rows in place itself.
    """

    # Decoding is never differentiated: the forward keeps no autograd graph (a GRAPH kernel's
    # first launch would otherwise park the prompt's activations until its next launch, since
    # the cache's bookkeeping buffers make the forward one a backward could not recompute); a
    # gradient through the Cell is refused, naming those buffers.
    _record = False

    def __init__(self, model: PreTrainedModel, max_cache_len: int, batch_size: int = 1, *,
                 compile: bool | Mapping[str, Any] = False):
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

        from .static_cache import StaticCacheLM

        if max_cache_len < 2 or batch_size < 1:
            raise ValueError(f"ms_aten.causal_lm: max_cache_len must be at least 2 and "
                             f"batch_size at least 1; got {max_cache_len}, {batch_size}")
        # The wrapper insists on a static cache in the generation config; the user's config is
        # put back as it was.
        config = model.generation_config
        saved = config.cache_implementation, config.use_cache
        config.cache_implementation, config.use_cache = "static", True
        try:
            wrapper = TorchExportableModuleWithStaticCache(model, batch_size, max_cache_len)
        finally:
            config.cache_implementation, config.use_cache = saved
        self.max_cache_len = max_cache_len
        self.batch_size = batch_size
        # The embedding's rows: a token past them is refused on the host (decode_checks).
        self.vocab_size = int(getattr(model.get_input_embeddings(), "num_embeddings",
                                      model.config.vocab_size))
        # The program's `attended` input is a prefix of these.
        self._arange = np.arange(max_cache_len, dtype=np.int64)
        self._positions = Tensor(self._arange)
        seq = Dim("seq", min=1, max=max_cache_len)
        # The wrapper in the model's mode: a new Module is in train mode, and capturing it
        # would set the whole tree to that mode, the model with it (dropout on).
        step = StaticCacheLM(wrapper).train(model.training)
        # A prompt of 2 tokens: an example of size 1 would specialize the sequence dim to 1.
        # Strict capture: non-strict export sees the cache's tensors (held by StaticCache, not
        # a Module) as constants, and its run_decompositions fails on their writes.
        super().__init__(step, (torch.zeros(batch_size, 2, dtype=torch.long), torch.arange(2),
                                torch.arange(2)),
                         dynamic_shapes=({1: seq}, {0: seq},
                                         {0: Dim("attended", min=1, max=max_cache_len)}),
                         strict=True, compile=compile)
        self._where = f"ms_aten.causal_lm({type(model).__name__})"

    def check(self, input_ids: Tensor, cache_position: Tensor) -> None:
        """ValueError, naming the limit, for a batch size other than the cache's or a position
        outside it; `cell(...)` checks this before every call."""
        self._check(input_ids, _host(cache_position))

    def _check(self, input_ids: Tensor, positions: np.ndarray) -> None:
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

    def __call__(self, input_ids: Tensor, cache_position: Tensor,
                 attended: Tensor | None = None) -> Tensor:
        """`attended`: the program's third input, whose length is the cache prefix the step
        reads (cache_position[-1] + 1); made here from the positions when not given (a given
        one, as ms_aten.generate's loop passes, is the caller's to get right)."""
        # Before MindSpore's call, which in GRAPH mode goes straight to the compiled graph;
        # a call from inside another graph (ms_aten.generate's loop) is compiled into it and is
        # not checked here.
        self._check_inputs([input_ids, cache_position], self._where)
        positions = _host(cache_position)
        self._check(input_ids, positions)
        if attended is None:
            # Made from the positions the check read: construct's slice by cache_position's
            # value would make a GRAPH-mode call stop mid-graph to read it (about 1 ms per
            # call, a third of a 4-layer GPT-2's decode step).
            attended = Tensor.from_numpy(self._arange[:int(positions.reshape(-1)[-1]) + 1])
        return build(self._nodes, nn.Cell.__call__(self, input_ids, cache_position, attended,
                                                   **{LEAVES: True}))

    def construct(self, input_ids, cache_position, attended=None, **kwargs):
        if attended is None:  # a call inside another graph
            attended = self._positions[:cache_position[-1] + 1]
        return self._outputs(call(self._function, self.weights,
                                  (input_ids, cache_position, attended)), kwargs)


def _host(value: Tensor | np.ndarray) -> np.ndarray:
    return value.asnumpy() if isinstance(value, Tensor) else np.asarray(value)


def causal_lm(model: PreTrainedModel, max_cache_len: int, batch_size: int = 1, *,
              compile: bool | Mapping[str, Any] = False) -> CausalLM:
    """A HuggingFace causal LM (GPT-2, Llama, ...: one transformers'
    TorchExportableModuleWithStaticCache takes) as a Cell over a static KV cache of
    `max_cache_len` positions for `batch_size` sequences: `logits = cell(input_ids,
    cache_position)`; see CausalLM, and ms_aten.generate for the decoding loop. `compile`: as
    ms_aten.module's (True, or {"cache_dir": path}): the step as compiled code."""
    return CausalLM(model, max_cache_len, batch_size, compile=compile)
