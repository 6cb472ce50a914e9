"""The batched decoding benchmark's torch eager side, in a process that never imports MindSpore.
decode_batch/run.py starts it; it prints one RESULT line of JSON.

    .venv/bin/python -m benchmarks.decode_batch.worker_torch --bandwidth 1024
    .venv/bin/python -m benchmarks.decode_batch.worker_torch --model llama-0.5b \\
        --dtypes bfloat16 --batches 4 --reference
    .venv/bin/python -m benchmarks.decode_batch.worker_torch --model llama-0.5b \\
        --dtypes float32 --batches 4 --route static-loop --expect tokens.json

--bandwidth MIB: the machine's memory bandwidth, the best of 5 copies of a MIB-MiB buffer into
another by torch (ATen's threads, as the decoding kernels), counting the bytes read and
written. --reference: per cell, model.generate's tokens (untimed) and the model's facts for
the bound: its parameters, their bytes (a tied embedding once), the KV cache's bytes per
position. Routes, under torch.no_grad, greedy, the prompts left-padded with their mask:
- generate: `model.generate(input_ids, attention_mask, max_new_tokens, do_sample=False)`, its
  default (dynamic) cache;
- static-loop: transformers' TorchExportableModuleWithStaticCache for the batch, called token
  by token in a Python loop with the mask one column longer at each, through ms_aten's
  StaticCacheLM (the module ms_aten.causal_lm captures: the wrapper's own forward takes no
  mask, and its cache's layers attend to the positions written so far), keeping the last
  position's logits (its logits_to_keep, as model.generate and ms_aten.generate do), the argmax
  of the float32 logits taken between calls.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
import time
from types import ModuleType
from typing import Any

import numpy as np
import torch
import transformers

from benchmarks.common.workers import ROOT, emit
from benchmarks.decode.workloads import metadata, static_cache_wrapper
from benchmarks.decode_batch.workloads import (
    PAD,
    TORCH_ROUTES,
    Generate,
    Task,
    add_task_arguments,
    build,
    cell_key,
    prompts,
    task_of,
    time_route,
)


def bandwidth_gb_s(mib: int, tries: int = 5) -> float:
    """GB/s (10^9 bytes) of the fastest of `tries` copies of a `mib`-MiB buffer, counting its
    bytes twice (read and written)."""
    source = torch.ones(mib * 2**20 // 4)
    target = torch.empty_like(source)
    target.copy_(source)  # the pages touched before timing
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.numel() * source.element_size() / best / 1e9


@functools.cache
def static_cache_module() -> ModuleType:
    """ms_aten/decoding/static_cache.py (it imports torch and transformers only), loaded from
    its file: `import ms_aten.decoding.static_cache` would run ms_aten's __init__, which
    imports MindSpore."""
    spec = importlib.util.spec_from_file_location(
        "ms_aten_static_cache", ROOT / "ms_aten" / "decoding" / "static_cache.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def facts(model: transformers.PreTrainedModel, wrapper: torch.nn.Module) -> dict:
    """What the bound needs: the model's parameters (parameters() yields a tied one once) and
    their bytes, and the static cache's bytes per position (keys and values, every layer)."""
    layers: list[Any] = wrapper.static_cache.layers  # type: ignore[union-attr,assignment]
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "kv_bytes_per_position": sum(
                2 * layer.keys.numel() // layer.keys.shape[2] * layer.keys.element_size()
                for layer in layers)}


def generator(model: transformers.PreTrainedModel, ids: np.ndarray, mask: np.ndarray) -> Generate:
    input_ids, attention_mask = torch.from_numpy(ids), torch.from_numpy(mask)

    def generate(new: int) -> np.ndarray:
        with torch.no_grad():
            out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=new,
                                 do_sample=False, pad_token_id=PAD)
        return out[:, ids.shape[1]:].numpy()
    return generate


def static_loop(step: torch.nn.Module, ids: np.ndarray, mask: np.ndarray) -> Generate:
    batch, width = ids.shape

    def generate(new: int) -> np.ndarray:
        attention_mask, last = torch.from_numpy(mask), torch.tensor([-1])
        with torch.no_grad():
            logits = step(torch.from_numpy(ids), torch.arange(width), attention_mask, last)
            tokens = []
            for position in range(width, width + new):
                token = logits[:, -1].float().argmax(-1, keepdim=True)
                tokens.append(token)
                if position < width + new - 1:  # the last token is not fed back
                    attention_mask = torch.cat(
                        [attention_mask, torch.ones(batch, 1, dtype=torch.long)], 1)
                    logits = step(token, torch.tensor([position]), attention_mask, last)
        return torch.cat(tokens, 1).numpy()
    return generate


def run_cell(task: Task, dtype: str, batch: int, reference: bool) -> dict:
    model = build(task.model, dtype)
    ids, mask = prompts(task.shape, batch, model.config.get_text_config().vocab_size)
    start = time.perf_counter()
    wrapper = static_cache_wrapper(model, ids.shape[1] + task.shape.new_tokens, batch)
    step = static_cache_module().StaticCacheLM(wrapper)
    setup_s = time.perf_counter() - start
    result: dict = {"facts": facts(model, wrapper), "width": ids.shape[1],
                    "lengths": mask.sum(1).tolist(), "routes": {}}
    expect = task.expect.get(cell_key(dtype, batch))
    if reference:
        result["reference"] = generator(model, ids, mask)(task.shape.new_tokens).tolist()
        expect = expect or result["reference"]
    check = expect if dtype == "float32" else None  # bfloat16: compared by run.py, not asserted
    for route in task.routes:
        run = static_loop(step, ids, mask) if route == "static-loop" else \
            generator(model, ids, mask)
        result["routes"][route] = time_route(run, setup_s if route == "static-loop" else 0.0,
                                             task, check, f"{task.model} {dtype} {route}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_task_arguments(parser, TORCH_ROUTES, model_required=False)
    parser.add_argument("--reference", action="store_true",
                        help="per cell, model.generate's tokens (untimed) and the facts")
    parser.add_argument("--bandwidth", type=int, metavar="MIB",
                        help="first measure the memory bandwidth with a MIB-MiB copy")
    args = parser.parse_args()
    result: dict = {"meta": metadata("torch", torch.get_num_threads()), "cells": {}}
    if args.bandwidth:
        result["bandwidth_gb_s"] = bandwidth_gb_s(args.bandwidth)
    if args.model:
        task = task_of(args)
        for dtype, batch in task.cells():
            result["cells"][cell_key(dtype, batch)] = run_cell(task, dtype, batch,
                                                               args.reference)
    if "mindspore" in sys.modules:
        raise SystemExit("the torch eager worker imported MindSpore: its timings are void")
    emit(result)


if __name__ == "__main__":
    main()
