"""The whole-model benchmark's torch eager side, in a process that never imports MindSpore (so
that MindSpore's runtime threads do not compete with torch's). models/run.py and
models/memory.py start it; it prints one RESULT line of JSON.

    .venv/bin/python -m benchmarks.models.worker_torch --model gpt2-tiny [--measure memory
        --route forward+backward]

Routes: the forward under no_grad; the forward and backward (gradients zeroed, kept
allocated, as the ms_aten route's gradient buffers are); a training step with
torch.optim.Adam (torch's default implementation on CPU, a loop over parameters) and with
Adam(fused=True); Adam's update alone, on gradients already there. With --compile
torch.compile, the forward and the steps run the model as torch.compile(model) (TorchInductor,
torch's defaults), and the first call of each route, which compiles it, is reported apart.
"""
from __future__ import annotations

import copy
import sys
import time

import torch

from benchmarks.common.workers import emit
from benchmarks.models.workloads import (
    BETAS,
    EPS,
    LR,
    TORCH_ADAM,
    TORCH_FORWARD,
    TORCH_GRAD,
    TORCH_STEP,
    TORCH_STEP_FUSED,
    Task,
    case,
    fingerprint,
    metadata,
    models,
    parse_task,
    peak_memory,
    time_routes,
)


def routes(task: Task) -> tuple[dict, float]:
    c = case(task.model)
    module, x, target = c.module, c.inputs[0], c.target
    with torch.no_grad():
        reference = fingerprint(models.logits(module(x)).numpy())
    compiled = task.compile == "torch.compile"
    run = torch.compile(module) if compiled else module

    def forward() -> None:
        with torch.no_grad():
            run(x)

    def loss_of(model: torch.nn.Module) -> torch.Tensor:
        return models.torch_loss(c.loss, models.logits(model(x)), target)

    def grad() -> float:
        module.zero_grad(set_to_none=False)
        loss = loss_of(run)
        loss.backward()
        return loss.item()

    def stepper(fused: bool):
        model = copy.deepcopy(module)
        optimizer = torch.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS, fused=fused)
        call = torch.compile(model) if compiled else model

        def step() -> float:
            optimizer.zero_grad()
            loss = loss_of(call)
            loss.backward()
            optimizer.step()
            return loss.item()
        return step, optimizer

    step, _ = stepper(False)
    step_fused, _ = stepper(True)
    adam_step, adam = stepper(False)

    def adam_update() -> None:
        if not adam.state:
            adam_step()  # gradients in place for the update alone, at its first call
        adam.step()
    return {TORCH_FORWARD: forward, TORCH_GRAD: grad, TORCH_STEP: step,
            TORCH_STEP_FUSED: step_fused, TORCH_ADAM: adam_update}, reference


def first_calls(calls: dict) -> dict[str, float]:
    """Each route's first call, timed: torch.compile compiles there."""
    seconds = {}
    for name, call in calls.items():
        start = time.perf_counter()
        call()
        seconds[name] = time.perf_counter() - start
    return seconds


def main() -> None:
    task = parse_task(__doc__.splitlines()[0])
    if task.threads:
        torch.set_num_threads(task.threads)
    calls, reference = routes(task)
    if task.route is not None:
        calls = {task.route: calls[task.route]}
    result = {"model": task.model, "fingerprint": reference, "compile": task.compile,
              "meta": metadata("torch", torch.get_num_threads()),
              "first_call_s": first_calls(calls)}
    if task.measure == "memory":
        result["memory"] = {name: peak_memory(call) for name, call in calls.items()}
    else:
        result["routes"] = time_routes(calls, task.timing)
    if "mindspore" in sys.modules:
        raise SystemExit("the torch eager worker imported MindSpore: its timings are void")
    emit(result)


if __name__ == "__main__":
    main()
