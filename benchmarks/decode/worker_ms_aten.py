"""The decoding benchmark's ms_aten side, in a process of its own. decode/run.py starts it; it
prints one RESULT line of JSON.

    .venv/bin/python -m benchmarks.decode.worker_ms_aten --model gpt2-small --route graph-loop
        --expect tokens.json [--runs 3] [--new-tokens 16]

The model is `ms_aten.causal_lm(model, max_cache_len)` (transformers' static-cache wrapper
captured once, the sequence dim dynamic, the KV cache Parameters the program writes in place),
made anew for each route. Routes:
- graph-generate: `ms_aten.generate(lm, prompt, max_new_tokens)` in GRAPH mode, the whole loop
  one compiled graph: only its total is seen from outside;
- graph-loop: a Python loop calling the Cell per token in GRAPH mode (compiled once, at the
  first call): the prompt at cache positions 0..n-1, then each token at the next position, the
  logits read back and their argmax taken on the host between calls;
- pynative-loop: the same loop in PYNATIVE mode;
- compiled-generate, compiled-loop, compiled-pynative-loop: graph-generate, graph-loop and
  pynative-loop over `ms_aten.causal_lm(..., compile=True)`, the step compiled by AOTInductor (in
  $MS_ATEN_CACHE_DIR, which run.py points at a folder of its own: its first process compiles,
  and its capture time includes that).
Every generation's tokens must equal --expect (torch's model.generate, computed by run.py in a
torch worker first: torch eager here would start a second OpenMP team beside ms_aten's, which
libgomp then throttles). ms_aten's kernel launches are counted over the timed generations.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import mindspore as ms
import numpy as np

import ms_aten
from benchmarks.common.workers import emit
from benchmarks.decode.workloads import (
    COMPILED_ROUTES,
    MS_ATEN_ROUTES,
    Run,
    Task,
    metadata,
    model,
    parse_task,
    prompt,
    time_route,
)


def step_loop(lm: ms_aten.CausalLM, ids: np.ndarray, new: int) -> Run:
    length = ids.shape[1]

    def loop(done: Callable[[], None]) -> list[int]:
        logits = lm(ms.Tensor(ids), ms.Tensor(np.arange(length)))
        tokens = []
        for position in range(length, length + new):
            token = logits.asnumpy()[:, -1].argmax(-1)[:, None]
            tokens.append(int(token[0, 0]))
            done()
            if position < length + new - 1:  # the last token is not fed back
                logits = lm(ms.Tensor(token), ms.Tensor([position]))
        return tokens
    return loop


def whole_loop(lm: ms_aten.CausalLM, ids: np.ndarray, new: int) -> Run:
    def generate(_done: Callable[[], None]) -> list[int]:
        return ms_aten.generate(lm, ids, max_new_tokens=new).asnumpy()[0, ids.shape[1]:].tolist()
    return generate


def setup(route: str, task: Task) -> tuple[Run, float]:
    """The route's generation and its setup time (the capture)."""
    ms.set_context(mode=ms.PYNATIVE_MODE if "pynative" in route else ms.GRAPH_MODE)
    module, ids = model(task.model), prompt(task.model).numpy()
    start = time.perf_counter()
    lm = ms_aten.causal_lm(module, max_cache_len=task.workload.max_cache_len,
                           compile=route in COMPILED_ROUTES)
    make = whole_loop if route.endswith("-generate") else step_loop
    return make(lm, ids, task.new_tokens), time.perf_counter() - start


def main() -> None:
    task = parse_task(__doc__.splitlines()[0], MS_ATEN_ROUTES, offer_reference=False)
    ms.set_device("CPU")
    result: dict = {"model": task.model, "routes": {},
                    "meta": {**metadata("ms_aten", ms_aten.get_num_threads()),
                             "mindspore": ms.__version__, "ms_aten": ms_aten.__version__}}
    for route in task.routes:
        run, setup_s = setup(route, task)
        result["routes"][route] = time_route(run, setup_s, task, route, ms_aten.launch_count)
    emit(result)


if __name__ == "__main__":
    main()
