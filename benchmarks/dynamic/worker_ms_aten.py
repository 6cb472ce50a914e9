"""The dynamic-shape benchmark's ms_aten side, in a process of its own. dynamic/run.py starts
it; it prints one RESULT line of JSON.

    .venv/bin/python -m benchmarks.dynamic.worker_ms_aten --workload decode|train
        --route graph|pynative-dynamic|static [--route ...] [--warm 5] [--tokens 40]
        [--lengths 6]

Several --route: each in turn, in this process (dynamic/run.py's --quick).

- dynamic: `ms_aten.module(model, inputs, dynamic_shapes=...)` with a dynamic sequence dim
  (and batch dim, for training): one capture; in GRAPH mode the Cell declares its dynamic dims
  to MindSpore (decode calls `cell(x)`) and the training step is `ms.jit(dynamic=1)`.
- static: the module captured at its example shape, as before dynamic shapes: each new length
  captures again (once: the programs are kept per shape) and, in GRAPH mode, compiles again
  (MindSpore keeps a graph per shape), so the warm runs time the static programs at the same
  lengths; the training step is a plain `ms.jit`.

Decode: `cell(x)`, then MindSpore's argmax and concat, the tokens read back after each step.
Train: MindSpore's cross entropy (tests/loss_cell.py), `ms.value_and_grad` and
`ms_aten.optim.Adam` (torch's update, so the losses compare with torch's Adam). The capture at
construction is the setup time; the kernel launches per item are counted in a warm run.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import mindspore as ms
from mindspore import ops
from torch.export import Dim

import ms_aten
from benchmarks.common.timing import ms_sync
from benchmarks.common.workers import emit
from benchmarks.dynamic.workloads import (
    BATCH,
    EPOCHS,
    LR,
    MAX_LENGTH,
    Run,
    arguments,
    batches,
    items,
    model,
    prompt,
    run_timed,
)
from ms_aten import to_ms

# isort: split
from loss_cell import LossCell  # tests/loss_cell.py; workloads put tests/ on sys.path


def capture(workload: str, shapes: str) -> tuple[ms_aten.TorchModule, float]:
    """The Cell and its capture time in seconds."""
    seq = Dim("seq", min=2, max=MAX_LENGTH)
    if workload == "decode":
        example, dims = prompt(), {"input_ids": {1: seq}}
    else:
        example, dims = batches()[0][0], {"input_ids": {0: Dim("batch", min=1, max=64), 1: seq}}
    torch_model = model()
    start = time.perf_counter()
    cell = ms_aten.module(torch_model, (example,),
                          dynamic_shapes=dims if shapes == "dynamic" else None)
    return cell, time.perf_counter() - start


def decoder(cell: ms_aten.TorchModule, length: int) -> Run:
    start = to_ms(prompt())

    def decode(done: Callable[[], None]) -> list:
        tokens = start
        while tokens.shape[1] < length:
            next_token = ops.argmax(cell(tokens)["logits"][:, -1], dim=-1, keepdim=True)
            tokens = ops.concat([tokens, next_token.astype(tokens.dtype)], axis=1)
            tokens.asnumpy()  # each token is read back, as a generation loop does
            done()
        return tokens.asnumpy()[0].tolist()
    return decode


def trainer(cell: ms_aten.TorchModule, graph: bool, shapes: str, lengths: int) -> Run:
    optimizer = ms_aten.optim.Adam(cell.trainable_params(), lr=LR)
    grad_fn = ms.value_and_grad(LossCell(cell, "lm"), None, optimizer.parameters)

    def step(tokens, target):
        loss, grads = grad_fn(tokens, target)
        optimizer(grads)
        return loss

    if graph:
        step = ms.jit(step, dynamic=1) if shapes == "dynamic" else ms.jit(step)
    data = [(to_ms(tokens), to_ms(target)) for tokens, target in batches(lengths)]

    def train(done: Callable[[], None]) -> list:
        # The warm runs train on (the cold run's losses are the ones checked): a step's time
        # does not depend on the weights.
        losses = []
        for _ in range(EPOCHS):
            for tokens, target in data:
                losses.append(float(step(tokens, target)))  # float() waits for the step
                done()
        return losses
    return train


def time_route(workload: str, mode: str, shapes: str, tokens: int, lengths: int,
               warm: int) -> dict:
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    cell, setup_s = capture(workload, shapes)
    run = (decoder(cell, tokens) if workload == "decode"
           else trainer(cell, mode == "graph", shapes, lengths))
    n = items(workload, tokens, lengths)
    result = run_timed(n, run, setup_s, warm)
    before = ms_aten.launch_count()
    run(ms_sync)
    return {**result, "launches_per_item": (ms_aten.launch_count() - before) / n}


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--route", action="append", required=True,
                        choices=[f"{m}-{s}" for m in ("graph", "pynative")
                                 for s in ("dynamic", "static")])
    args = parser.parse_args()
    ms.set_device("CPU")
    routes = {}
    for route in args.route:
        mode, shapes = route.split("-")
        routes[route] = time_route(args.workload, mode, shapes, args.tokens, args.lengths,
                                   args.warm)
    emit({"side": "ms_aten", "batch": BATCH, "threads": ms_aten.get_num_threads(),
          "routes": routes})


if __name__ == "__main__":
    main()
