"""A Cell is freed when the last reference to it goes, in both modes, with the memory it held:
module and function Cells, a causal_lm Cell that ms_aten.generate decoded with, and compiled
Cells (test_compile.py). Checked by weak references and by the process's resident memory, which
10 to 12 Cells dropped one after another must not grow by more than a fraction of one Cell's
weights.
"""
from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import mindspore as ms
import numpy as np
import torch
import transformers

import ms_aten

from common import growth_per_cell, resident_mib, set_mode


def assert_freed(make_and_use: Callable[[], ms.nn.Cell], n: int = 20,
                 per_cell_mib: float = 1.0) -> None:
    """make_and_use() n times, each Cell dropped after its use: every one is gone, and from the
    fifth on (caches warm) resident memory grows by at most per_cell_mib per Cell (a Cell here
    holds 4 to 8 MiB; common.growth_per_cell)."""
    cells, resident = [], []
    for i in range(n):
        cells.append(weakref.ref(make_and_use()))
        gc.collect()
        if i >= 3:
            resident.append(resident_mib())
    alive = sum(cell() is not None for cell in cells)
    grown = growth_per_cell(resident)
    assert alive == 0 and grown < per_cell_mib, (f"{alive} of {n} Cells alive, "
                                                 f"{grown:.2f} MiB resident per Cell "
                                                 f"(median; resident {resident})")


X = torch.randn(4, 1024)


def _module() -> ms.nn.Cell:  # 8 MiB of weights: torch's and the Parameters'
    cell = ms_aten.module(torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU()),
                          (X,))
    np.testing.assert_allclose(cell(ms.Tensor(X.numpy())).shape, (4, 1024))
    return cell


def _function() -> ms.nn.Cell:  # a 4 MiB constant
    w = torch.randn(1024, 1024)
    cell = ms_aten.function(lambda a: torch.tanh(a @ w), (X,))
    np.testing.assert_allclose(cell(ms.Tensor(X.numpy())).asnumpy(), torch.tanh(X @ w).numpy(),
                               rtol=1e-4, atol=1e-4)
    return cell


def test_module_and_function_cells_are_freed(mode):
    # GRAPH mode kept every one before (a starred primitive call in construct, a module's
    # recapture holding its Cell, the programs' constants in the library): 15 MiB per Cell.
    set_mode(mode)
    kinds = iter([_module, _function] * 10)
    assert_freed(lambda: next(kinds)(), n=12 if mode == "graph" else 10, per_cell_mib=3.0)


def _causal_lm() -> ms.nn.Cell:
    config = transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=256, n_layer=1,
                                     n_head=2, bos_token_id=None, eos_token_id=None)
    lm = ms_aten.causal_lm(transformers.GPT2LMHeadModel(config).eval(), max_cache_len=8)
    assert ms_aten.generate(lm, np.zeros((1, 3), np.int64), max_new_tokens=3).shape == (1, 6)
    return lm


def test_causal_lm_cells_are_freed_after_generate(mode):
    set_mode(mode)
    # One Cell, by its weak reference only: a causal_lm capture takes seconds, and torch's own
    # caches from its strict capture (not the Cell's) grow by several MiB per capture.
    cell = weakref.ref(_causal_lm())
    gc.collect()
    assert cell() is None
