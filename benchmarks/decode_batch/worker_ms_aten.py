"""The batched decoding benchmark's ms_aten side, in a process of its own. decode_batch/run.py
starts it; it prints one RESULT line of JSON.

    .venv/bin/python -m benchmarks.decode_batch.worker_ms_aten --model llama-0.5b \\
        --dtypes float32 --batches 4 --route graph-generate --expect tokens.json

Per cell, the model (built as the torch worker builds it, in its dtype) is
`ms_aten.causal_lm(model, max_cache_len, batch_size)`, captured once per linear kernel and
shared by the process's routes; the cache holds the longest prompt and the new tokens. Routes:
- graph-generate: `ms_aten.generate(lm, input_ids, attention_mask=..., max_new_tokens)` in
  GRAPH mode, the whole loop one compiled graph (compiled in the warm-up generation; the
  one-token generation that times the prefill runs the same graph);
- pynative-generate: the same call in PYNATIVE mode, the loop run step by step;
- graph-onednn, pynative-onednn: the two over `causal_lm(..., linear_kernel="onednn")`.
Every float32 generation's tokens must equal --expect (torch's model.generate, from a torch
worker: torch eager here would start a second OpenMP team beside ms_aten's); bfloat16's are
returned for run.py to compare. ms_aten's kernel launches are counted over the timed ones.
"""
from __future__ import annotations

import argparse
import time

import mindspore as ms
import numpy as np

import ms_aten
from benchmarks.common.workers import emit
from benchmarks.decode.workloads import metadata
from benchmarks.decode_batch.workloads import (
    MS_ATEN_ROUTES,
    PAD,
    Generate,
    Task,
    add_task_arguments,
    build,
    cell_key,
    prompts,
    task_of,
    time_route,
)


def generator(lm: ms_aten.CausalLM, ids: np.ndarray, mask: np.ndarray) -> Generate:
    def generate(new: int) -> np.ndarray:
        sequences = ms_aten.generate(lm, ids, attention_mask=mask, max_new_tokens=new,
                                     pad_token_id=PAD)
        assert not isinstance(sequences, ms_aten.GenerateOutput)  # no output_logits
        return sequences.asnumpy()[:, ids.shape[1]:]
    return generate


def run_cell(task: Task, dtype: str, batch: int) -> dict:
    model = build(task.model, dtype)
    ids, mask = prompts(task.shape, batch, model.config.get_text_config().vocab_size)
    captured: dict[str, tuple[ms_aten.CausalLM, float]] = {}  # per linear kernel
    expect = task.expect.get(cell_key(dtype, batch)) if dtype == "float32" else None
    routes = {}
    for route in task.routes:
        kernel = "onednn" if route.endswith("-onednn") else "aten"
        if kernel not in captured:
            start = time.perf_counter()
            lm = ms_aten.causal_lm(model, max_cache_len=ids.shape[1] + task.shape.new_tokens,
                                   batch_size=batch, linear_kernel=kernel)
            captured[kernel] = lm, time.perf_counter() - start
        lm, setup_s = captured[kernel]
        ms.set_context(mode=ms.PYNATIVE_MODE if route.startswith("pynative") else ms.GRAPH_MODE)
        routes[route] = time_route(generator(lm, ids, mask), setup_s, task, expect,
                                   f"{task.model} {dtype} {route}", ms_aten.launch_count)
    return {"routes": routes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_task_arguments(parser, MS_ATEN_ROUTES)
    task = task_of(parser.parse_args())
    ms.set_device("CPU")
    result: dict = {"meta": {**metadata("ms_aten", ms_aten.get_num_threads()),
                             "mindspore": ms.__version__, "ms_aten": ms_aten.__version__},
                    "cells": {cell_key(dtype, batch): run_cell(task, dtype, batch)
                              for dtype, batch in task.cells()}}
    emit(result)


if __name__ == "__main__":
    main()
