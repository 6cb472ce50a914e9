"""The decoding benchmark's torch eager side, in a process that never imports MindSpore (so that
MindSpore's runtime threads do not compete with torch's). decode/run.py starts it; it prints one
RESULT line of JSON.

    .venv/bin/python -m benchmarks.decode.worker_torch --model gpt2-small --reference
    .venv/bin/python -m benchmarks.decode.worker_torch --model gpt2-small --route static-loop
        --expect tokens.json [--runs 3]

--reference: only the tokens of model.generate (the reference every route must make). Routes,
under torch.no_grad:
- static-loop: transformers' TorchExportableModuleWithStaticCache (the computation
  ms_aten.causal_lm captures) called in a Python loop: the prompt at cache positions
  0..n-1, then each token at the next position, the argmax read back between calls;
- generate: `model.generate(prompt, max_new_tokens, min_new_tokens, do_sample=False)` with its
  default (dynamic) cache; a stopping criterion that never stops stamps each token.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from benchmarks.common.workers import emit
from benchmarks.decode.workloads import (
    TORCH_ROUTES,
    Run,
    Task,
    metadata,
    model,
    parse_task,
    prompt,
    static_cache_wrapper,
    time_route,
)


class Stamps(StoppingCriteria):
    """Calls `done` as generate makes each token (it asks its criteria after every token)."""

    def __init__(self, done: Callable[[], None]) -> None:
        self.done = done

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        self.done()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def generator(module: torch.nn.Module, ids: torch.Tensor, new: int) -> Run:
    def generate(done: Callable[[], None]) -> list[int]:
        with torch.no_grad():
            out = module.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                  min_new_tokens=new, do_sample=False, pad_token_id=0,
                                  stopping_criteria=StoppingCriteriaList([Stamps(done)]))
        return out[0, ids.shape[1]:].tolist()
    return generate


def static_loop(wrapper: torch.nn.Module, ids: torch.Tensor, new: int) -> Run:
    length = ids.shape[1]

    def loop(done: Callable[[], None]) -> list[int]:
        with torch.no_grad():
            logits = wrapper(input_ids=ids, cache_position=torch.arange(length))
            tokens = []
            for position in range(length, length + new):
                token = logits[:, -1].argmax(-1, keepdim=True)
                tokens.append(int(token))
                done()
                if position < length + new - 1:  # the last token is not fed back
                    logits = wrapper(input_ids=token, cache_position=torch.tensor([position]))
        return tokens
    return loop


def setup(route: str, task: Task) -> tuple[Run, float]:
    """The route's generation and its setup time (building the static cache)."""
    module, ids = model(task.model), prompt(task.model)
    start = time.perf_counter()
    if route == "static-loop":
        run = static_loop(static_cache_wrapper(module, task.workload.max_cache_len), ids,
                          task.new_tokens)
    else:
        run = generator(module, ids, task.new_tokens)
    return run, time.perf_counter() - start


def main() -> None:
    task = parse_task(__doc__.splitlines()[0], TORCH_ROUTES, offer_reference=True)
    if task.reference:
        run, _ = setup("generate", task)
        result: dict = {"model": task.model, "tokens": run(lambda: None)}
    else:
        result = {"model": task.model, "meta": metadata("torch", torch.get_num_threads()),
                  "routes": {}}
        for route in task.routes:
            run, setup_s = setup(route, task)
            result["routes"][route] = time_route(run, setup_s, task, route)
    if "mindspore" in sys.modules:
        raise SystemExit("the torch eager worker imported MindSpore: its timings are void")
    emit(result)


if __name__ == "__main__":
    main()
