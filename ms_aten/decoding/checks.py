"""What decoding takes, checked on the host before any graph runs (causal_lm's calls,
ms_aten.generate): in GRAPH mode a kernel's error (a token past the embedding table, the
gather after a NaN temperature) would leave the compiled graph unable to run again (MindSpore
2.10 keeps a graph's failure: "An error occurred in the previous step")."""
from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np


def check_tokens(where: str, ids: np.ndarray, vocab_size: int) -> None:
    """ValueError naming the first token of `ids` outside the vocabulary [0, vocab_size)."""
    if ids.size == 0:
        return
    outside = np.flatnonzero((ids < 0) | (ids >= vocab_size))
    if outside.size:
        index = np.unravel_index(outside[0], ids.shape)
        raise ValueError(f"{where}: input_ids{list(map(int, index))} is token "
                         f"{int(ids[index])}, outside the vocabulary (vocab_size={vocab_size}: "
                         f"tokens 0 to {vocab_size - 1})")


def check_sampling(where: str, temperature: float, top_k: int | None, top_p: float,
                   repetition_penalty: float = 1.0) -> None:
    """ValueError (TypeError for a value of another type) naming the first sampling argument
    out of range: temperature and repetition_penalty finite and > 0, top_p in (0, 1], top_k a
    whole number >= 0 (0: off, as in transformers) or None."""
    for name, value in (("temperature", temperature),
                        ("repetition_penalty", repetition_penalty)):
        _real(where, name, value)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{where}: {name} must be finite and > 0, got {value!r}")
    _real(where, "top_p", top_p)
    if not 0 < top_p <= 1:  # NaN fails both comparisons
        raise ValueError(f"{where}: top_p must be in (0, 1], got {top_p!r}")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, Integral):
            raise TypeError(f"{where}: top_k must be a whole number >= 0 or None, got "
                            f"{type(top_k).__name__} {top_k!r}")
        if top_k < 0:
            raise ValueError(f"{where}: top_k must be >= 0 or None, got {top_k}")


def _real(where: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{where}: {name} must be a number, got {type(value).__name__} "
                        f"{value!r}")
