"""Where a decode step's time goes, and what it copies: torch's profiler (every thread) over the
causal_lm Cell's GRAPH-mode step loop, after the prompt, for one workload of decode/run.py.

    .venv/bin/python -m benchmarks.decode.profile --model gpt2-small [--tokens 32]

Prints, per token: the ATen ops by self CPU time, and every write (aten::copy_, index_copy_,
index_put_) with the elements it writes, beside the cache's size: a per-token copy of the cache
would show as a write of a whole layer's keys or values (1 x heads x max_cache_len x head_dim
elements); the cache update itself writes one row per layer (1 x heads x 1 x head_dim).
"""
from __future__ import annotations

import argparse
import collections

import mindspore as ms
import numpy as np

import ms_aten
from benchmarks.common.profiler import profile_all_threads
from benchmarks.decode.workloads import WORKLOADS, model, prompt

# The ops that write into a tensor, and which of their inputs holds what they write.
COPIES = {"aten::copy_": 1, "aten::index_copy_": 3, "aten::index_put_": 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(WORKLOADS), default="gpt2-small")
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    w = WORKLOADS[args.model]
    ms.set_context(mode=ms.GRAPH_MODE)
    lm = ms_aten.causal_lm(model(args.model), max_cache_len=w.max_cache_len)
    ids = prompt(args.model).numpy()
    logits = lm(ms.Tensor(ids), ms.Tensor(np.arange(ids.shape[1])))
    token = logits.asnumpy()[:, -1].argmax(-1)[:, None]
    position = ids.shape[1]
    lm(ms.Tensor(token), ms.Tensor([position])).asnumpy()  # compiled and warm
    with profile_all_threads(record_shapes=True) as prof:
        for i in range(args.tokens):
            logits = lm(ms.Tensor(token), ms.Tensor([position + 1 + i]))
            token = logits.asnumpy()[:, -1].argmax(-1)[:, None]
    per_op: dict[str, float] = collections.defaultdict(float)
    copies: dict[tuple[str, int], int] = collections.Counter()
    for event in prof.events():
        if event.name.startswith("aten::"):
            per_op[event.name] += event.self_cpu_time_total / args.tokens / 1e3
        if event.name in COPIES:
            source = event.input_shapes[COPIES[event.name]]
            copies[(event.name, int(np.prod(source)) if source else 1)] += 1
    cache_layer = w.max_cache_len * w.hidden  # one layer's keys (or values), batch 1
    print(f"{args.model}: {args.tokens} decode steps; a layer's keys: {cache_layer} elements")
    print("ATen self CPU ms per token, top 12:")
    for name, ms_per_token in sorted(per_op.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {name:40} {ms_per_token:8.3f}")
    print("writes per token (op, elements written, calls per token):")
    for (name, written), count in sorted(copies.items()):
        print(f"  {name:22} {written:>10}  {count / args.tokens:g}")


if __name__ == "__main__":
    main()
