"""One process of tests/test_repeated_cells.py: makes a Cell of each kind named in argv, uses
it and drops it, over and over, and prints one JSON line per kind: how many of its Cells are
still alive and the resident memory after each (MiB).

Run as `python repeated_cells_child.py graph module,function 6`.
"""
from __future__ import annotations

import gc
import json
import sys
import weakref

import mindspore as ms
import numpy as np
import torch
import transformers

import ms_aten

from common import resident_mib  # this script's folder, tests/, leads sys.path

X = torch.randn(4, 256, generator=torch.Generator().manual_seed(0))


def gpt2() -> transformers.PreTrainedModel:
    # 10 MiB of weights (8 of them the embedding): a Cell whose weights stayed would show.
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=16384, n_positions=32, n_embd=128, n_layer=2,
                                     n_head=2, bos_token_id=None, eos_token_id=None)
    return transformers.GPT2LMHeadModel(config).eval()


MODEL = torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.ReLU(),
                            torch.nn.Linear(2048, 256))  # 4 MiB of weights
WEIGHT = torch.randn(256, 2048)  # the function's 2 MiB constant
LM = None


class WhileLoop(ms.nn.Cell):
    """MindSpore alone: a Parameter (40 MiB) and a while loop over an input of dynamic shape,
    as ms_aten.generate's DecodeLoop (decoding/generate.py) has (which takes the weights as an
    input instead, so that MindSpore does not keep them)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.ones((1024, 10240), np.float32)), name="w")
        self.set_inputs(ms.Tensor(shape=[None, 1], dtype=ms.float32),
                        ms.Tensor(shape=[], dtype=ms.int64))

    def construct(self, x, steps):
        i = ms.Tensor(0, ms.int64)
        y = x + self.w[0, 0:1]
        while i < steps:
            x = x * 2
            y = x + self.w[0, 0:1]
            i = i + 1
        return y


def make(kind: str) -> ms.nn.Cell:
    """A Cell of the kind, used once."""
    global LM
    if kind == "mindspore-while":
        loop = WhileLoop()
        loop(ms.Tensor(np.zeros((2, 1), np.float32)), ms.Tensor(3, ms.int64))
        return loop
    if kind == "module":
        cell = ms_aten.module(MODEL, (X,))
        assert cell(ms.Tensor(X.numpy())).shape == (4, 256)
        return cell
    if kind == "function":
        cell = ms_aten.function(lambda x: torch.relu(x @ WEIGHT), (X,))
        assert cell(ms.Tensor(X.numpy())).shape == (4, 2048)
        return cell
    assert kind == "causal_lm-generate", kind
    LM = LM or gpt2()
    lm = ms_aten.causal_lm(LM, max_cache_len=8)
    assert ms_aten.generate(lm, np.zeros((1, 3), np.int64), max_new_tokens=3).shape == (1, 6)
    return lm


def main() -> None:
    ms.set_context(mode=ms.GRAPH_MODE if sys.argv[1] == "graph" else ms.PYNATIVE_MODE)
    n = int(sys.argv[3])
    for kind in sys.argv[2].split(","):
        cells, resident = [], []
        for _ in range(n):
            cells.append(weakref.ref(make(kind)))
            gc.collect()
            resident.append(resident_mib())
        print(json.dumps({"kind": kind, "alive": sum(c() is not None for c in cells),
                          "resident": resident}), flush=True)


if __name__ == "__main__":
    main()
