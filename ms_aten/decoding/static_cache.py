"""transformers' static KV cache as ms_aten.causal_lm captures it: the step attends to the
positions written so far, not to the whole cache. (Imports transformers, which ms_aten itself
does not need: causal_lm imports this module when it is called.)"""
from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers.cache_utils import StaticLayer


class PrefixLayer(StaticLayer):
    """A StaticLayer whose attention reads only the cache's first `attended` positions (those
    written so far, up to the last new one) instead of all max_cache_len: the keys and values
    it returns, and the mask's length, are that prefix. The step's cost then grows with the
    text, not with the cache (torch eager, GPT-2 small at positions 40-100: 40-42 ms per token
    over all of a 1,024-position cache, 37-38 over 160). It shares the StaticLayer's tensors and
    state."""

    attended: int | None = None  # set by StaticCacheLM for the call being traced

    def __init__(self, layer: StaticLayer) -> None:
        super().__init__(layer.max_cache_len)
        self.__dict__.update(vars(layer))

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        return keys[:, :, :self.attended], values[:, :, :self.attended]

    def get_mask_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return self.attended or self.max_cache_len, 0


class StaticCacheLM(torch.nn.Module):
    """transformers' static-cache wrapper called as forward(input_ids, cache_position,
    attention_mask, logits_to_keep), its cache's layers PrefixLayers. `attention_mask` is
    transformers' 2D mask (batch, positions so far): its length (a dynamic dim) is the number
    of cache positions the step attends to, the last position + 1, and its zeros are the left
    padding of a batch of prompts of different lengths, masked in every step. Each row's
    position ids come from it as model.generate makes them (the count of unpadded tokens before
    each, 0 on padding). `logits_to_keep`: the positions (of input_ids; negative from the end)
    whose logits are made, transformers' 1-D tensor form: the model projects only those hidden
    states onto the vocabulary, as model.generate's prefill does with the last one (a model
    whose forward takes no logits_to_keep has its logits indexed). (The wrapper's own forward
    passes no mask, and has inputs_embeds between the first two, which positional example
    inputs would fill. The program and its messages are named after this class.)"""

    def __init__(self, wrapper: torch.nn.Module) -> None:
        super().__init__()
        self.wrapper = wrapper
        cache_layers: list[StaticLayer] = wrapper.static_cache.layers  # type: ignore[union-attr,assignment]
        self.layers = [PrefixLayer(layer) for layer in cache_layers]
        cache_layers[:] = self.layers
        self._size_from_model()
        forward = wrapper.model.forward  # type: ignore[union-attr]
        self._keeps = "logits_to_keep" in inspect.signature(forward).parameters

    def _size_from_model(self) -> None:
        """Sizes each layer's keys and values from the model's own: one token through the
        model, the layers allocating on their first update as in model.generate's static cache.
        The wrapper sizes them from the config, which some attentions do not follow (Falcon's
        multi-query attention has one key/value head whatever num_kv_heads says)."""
        wrapper = self.wrapper
        batch = self.layers[0].batch_size  # set by the wrapper's early initialization
        for layer in self.layers:
            layer.is_initialized = False
        with torch.no_grad():
            wrapper.model(input_ids=torch.zeros(batch, 1, dtype=torch.long),  # type: ignore[operator]
                          past_key_values=wrapper.static_cache, use_cache=True)
        for i, layer in enumerate(self.layers):
            layer.cumulative_length.zero_()
            # The capture finds the cache through the wrapper's buffers.
            wrapper.register_buffer(f"key_cache_{i}", layer.keys, persistent=False)
            wrapper.register_buffer(f"value_cache_{i}", layer.values, persistent=False)

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor,
                attention_mask: torch.Tensor, logits_to_keep: torch.Tensor) -> torch.Tensor:
        positions = attention_mask.long().cumsum(-1) - 1
        position_ids = positions.masked_fill(attention_mask == 0, 0)[:, -input_ids.shape[1]:]
        for layer in self.layers:
            layer.attended = attention_mask.shape[1]
            # What the wrapper's forward does first: the cache's length is where the new
            # tokens go, so that one program serves every generation without a reset.
            layer.cumulative_length.copy_(cache_position[0])
        keep = {"logits_to_keep": logits_to_keep} if self._keeps else {}
        try:
            logits = self.wrapper.model(  # type: ignore[operator]
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                past_key_values=self.wrapper.static_cache, use_cache=True, **keep).logits
            return logits if self._keeps else logits[:, logits_to_keep]
        finally:
            for layer in self.layers:
                layer.attended = None
