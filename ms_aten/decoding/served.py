"""Which HuggingFace causal language models ms_aten.causal_lm serves: those whose KV cache
transformers' static cache holds as plain keys and values. The others are refused by name,
with the reason, before any capture."""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from ..programs.base import CaptureError

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def check_model(model: PreTrainedModel, where: str) -> None:
    """CaptureError for a model whose forward takes no KV cache (a recurrent state instead:
    Mamba, RWKV, xLSTM), before transformers' export wrapper fails on its config."""
    if "past_key_values" not in inspect.signature(model.forward).parameters:
        raise CaptureError(f"{where}: {type(model).__name__} is not served: its forward takes "
                           f"no past_key_values, so it keeps no KV cache for transformers' "
                           f"static cache to hold (a recurrent state, or none)")


def check_cache(model: PreTrainedModel, where: str) -> None:
    """CaptureError for a model whose static cache has layers other than key/value ones (those
    transformers' export wrapper takes: plain, sliding-window, shared), before the wrapper
    fails on them: a linear attention's recurrent state (Qwen3-Next), an indexed attention's."""
    from transformers.cache_utils import (
        DummyLayer,
        StaticCache,
        StaticLayer,
        StaticSlidingWindowLayer,
    )

    # Its layers allocate nothing until their first update.
    layers = StaticCache(config=model.config.get_text_config(), max_cache_len=1).layers
    taken = (StaticLayer, StaticSlidingWindowLayer, DummyLayer)
    other = sorted({type(layer).__name__ for layer in layers if type(layer) not in taken})
    if other:
        raise CaptureError(f"{where}: {type(model).__name__} is not served: its cache has "
                           f"{', '.join(other)} layers, which hold more than the keys and "
                           f"values whose written prefix the capture reads")
