"""Whole models: ms_aten.module in GRAPH mode against torch eager, side by side in one process.

    .venv/bin/python benchmarks/bench_models.py            # tiny and medium GPT-2 and BERT
    .venv/bin/python benchmarks/bench_models.py --quick    # tiny only, few repeats (CI smoke)

Per model: the forward (torch under no_grad; the ms_aten Cell compiled in GRAPH mode), the
forward and backward (torch's backward against a jitted ms.value_and_grad), one training step
(forward, backward and Adam: torch.optim.Adam against a jitted MindSpore step with nn.Adam),
the same forward replayed node by node through per-op `ms_aten.op` calls in PYNATIVE
mode, for contrast, and the ms_aten kernel launches per forward. Routes are timed in turns,
repeat after repeat, and each reports its median; results are checked against torch first.
Writes benchmarks/results/models.{md,json}.
"""
from __future__ import annotations

import argparse
import copy
import json
import operator
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import mindspore as ms
import numpy as np
import torch
from mindspore import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import models  # noqa: E402  (tests/models.py: the model factories the tests use)

import ms_aten  # noqa: E402
from ms_aten import to_ms  # noqa: E402
from ms_aten.programs import capture  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
CONFIGS = {
    "gpt2-tiny": lambda: models.gpt2(),
    "bert-tiny": lambda: models.bert(),
    "gpt2-medium": lambda: models.gpt2(layers=4, hidden=256, heads=4, seq=128, vocab=1000),
    "bert-medium": lambda: models.bert(layers=4, hidden=256, heads=4, seq=128, vocab=1000),
}


def per_op_forward(cell: ms_aten.TorchModule) -> Callable[[ms.Tensor], ms.Tensor]:
    """The exported graph replayed node by node, one ms_aten.op per node (PYNATIVE)."""
    exported = capture.export(cell._torch_module, cell._example, "per-op")
    graph = exported.graph_module.graph
    weights = dict(zip(cell._weight_names, cell.weights, strict=True))
    steps = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        schema = node.target._schema
        constants, tensors = {}, []
        for position, arg in enumerate(schema.arguments):
            given = node.kwargs.get(arg.name) if (arg.kwarg_only or position >= len(node.args)) \
                else node.args[position]
            if constants.is_tensor_arg(arg):
                tensors.append(given)
            elif arg.name in node.kwargs or position < len(node.args):
                constants[arg.name] = given
        name = f"{schema.name}.{schema.overload_name or 'default'}".replace(".default", "")
        steps.append((node, ms_aten.op(name, **constants), tensors))

    def forward(x: ms.Tensor) -> ms.Tensor:
        values = {}
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node, spec in zip(placeholders, exported.graph_signature.input_specs, strict=True):
            values[node] = x if spec.target is None else weights[
                cell._aliases.get(spec.target, spec.target)]
        def value(item):  # a graph value, or a Python number / None passed as it is
            return values[item] if isinstance(item, torch.fx.Node) else item

        for node, op, tensors in steps:
            args = [tuple(map(value, a)) if isinstance(a, (list, tuple)) else value(a)
                    for a in tensors]
            result = op(*args)
            values[node] = result
            for user in node.users:
                if user.target is operator.getitem:
                    values[user] = result[user.args[1]]
        output = next(n for n in graph.nodes if n.op == "output").args[0]
        return values[output[-1]]

    return forward


def timed(fn: Callable[[], object], iterations: int) -> float:
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    return (time.perf_counter() - start) / iterations


def bench(name: str, repeats: int, iterations: int) -> dict:
    torch.manual_seed(0)
    case = CONFIGS[name]()
    module, x_torch, target_torch = case.module, case.inputs[0], case.target
    ms.set_context(mode=ms.GRAPH_MODE)
    cell = ms_aten.module(copy.deepcopy(module), case.inputs)
    x, target = to_ms(x_torch), to_ms(target_torch)

    with torch.no_grad():
        expected = models.logits(module(x_torch)).numpy()
    got = cell(x).asnumpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    before = ms_aten.launch_count()
    cell(x).asnumpy()
    launches = ms_aten.launch_count() - before

    optimizer = nn.Adam(cell.trainable_params(), learning_rate=1e-4)
    grad_fn = ms.value_and_grad(models.LossCell(cell, case.loss), None, optimizer.parameters)

    @ms.jit
    def ms_grad(tokens, labels):
        return grad_fn(tokens, labels)[0]

    @ms.jit
    def ms_step(tokens, labels):
        loss, grads = grad_fn(tokens, labels)
        optimizer(grads)
        return loss

    torch_model = copy.deepcopy(module)
    torch_optimizer = torch.optim.Adam(torch_model.parameters(), lr=1e-4)

    def torch_step() -> float:
        torch_optimizer.zero_grad()
        loss = models.torch_loss(case.loss, models.logits(torch_model(x_torch)), target_torch)
        loss.backward()
        torch_optimizer.step()
        return loss.item()

    def torch_grad() -> float:
        torch_model.zero_grad()
        loss = models.torch_loss(case.loss, models.logits(torch_model(x_torch)), target_torch)
        loss.backward()
        return loss.item()

    def torch_forward():
        with torch.no_grad():
            return module(x_torch)

    routes = {
        "torch forward": torch_forward,
        "ms_aten forward": lambda: cell(x).asnumpy(),
        "torch fwd+bwd": torch_grad,
        "ms_aten fwd+bwd": lambda: float(ms_grad(x, target)),
        "torch train step": torch_step,
        "ms_aten train step": lambda: float(ms_step(x, target)),
    }
    try:
        ms.set_context(mode=ms.PYNATIVE_MODE)
        replay = per_op_forward(cell)
        np.testing.assert_allclose(replay(x).asnumpy(), expected, rtol=1e-4, atol=1e-5)
        per_op_error = None
    except Exception as error:  # noqa: BLE001  (reported in the table, not fatal)
        replay, per_op_error = None, f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
    times: dict[str, list[float]] = {route: [] for route in routes}
    if replay is not None:
        times["per-op ms_aten.op forward (PYNATIVE)"] = []
    for _ in range(repeats):
        ms.set_context(mode=ms.GRAPH_MODE)
        for route, fn in routes.items():
            fn()  # warm (compiles on the first repeat)
            times[route].append(timed(fn, iterations))
        if replay is not None:
            ms.set_context(mode=ms.PYNATIVE_MODE)
            replay(x).asnumpy()
            times["per-op ms_aten.op forward (PYNATIVE)"].append(
                timed(lambda: replay(x).asnumpy(), max(1, iterations // 4)))
    median = {route: statistics.median(values) for route, values in times.items()}
    return {"model": name, "nodes": cell.program.n_nodes, "launches_per_forward": launches,
            "ms": {route: 1e3 * t for route, t in median.items()},
            "forward_ratio": median["ms_aten forward"] / median["torch forward"],
            "grad_ratio": median["ms_aten fwd+bwd"] / median["torch fwd+bwd"],
            "train_ratio": median["ms_aten train step"] / median["torch train step"],
            "per_op_ratio": (median["per-op ms_aten.op forward (PYNATIVE)"]
                             / median["torch forward"]) if replay is not None else None,
            "per_op_error": per_op_error}


def report(rows: list[dict]) -> str:
    lines = ["| model | ATen nodes | launches / forward | torch fwd ms | ms_aten fwd ms "
             "| fwd ratio | fwd+bwd ratio | torch step ms | ms_aten step ms | step ratio "
             "| per-op fwd ratio |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t = r["ms"]
        per_op = f"{r['per_op_ratio']:.1f}x" if r["per_op_ratio"] else f"n/a ({r['per_op_error']})"
        lines.append(
            f"| {r['model']} | {r['nodes']} | {r['launches_per_forward']} | "
            f"{t['torch forward']:.2f} | {t['ms_aten forward']:.2f} | {r['forward_ratio']:.2f}x | "
            f"{r['grad_ratio']:.2f}x | "
            f"{t['torch train step']:.2f} | {t['ms_aten train step']:.2f} | "
            f"{r['train_ratio']:.2f}x | {per_op} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny models, few repeats")
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--threads", type=int, default=0,
                        help="ATen threads for both torch eager and ms_aten (0: ATen's default)")
    args = parser.parse_args(argv)
    ms.set_device("CPU")
    if args.threads:
        torch.set_num_threads(args.threads)
        ms_aten.set_num_threads(args.threads)
    names = args.models or ([n for n in CONFIGS if "tiny" in n] if args.quick else list(CONFIGS))
    repeats, iterations = (2, 3) if args.quick else (7, 10)
    rows = [bench(name, repeats, iterations) for name in names]
    table = report(rows)
    print(table)
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        stem = f"models_threads{args.threads}" if args.threads else "models"
        (RESULTS / f"{stem}.json").write_text(json.dumps(rows, indent=1))
        (RESULTS / f"{stem}.md").write_text(
            f"torch {torch.__version__}, MindSpore {ms.__version__}, CPU, "
            f"{torch.get_num_threads()} threads; median of {repeats} repeats of {iterations} "
            f"calls, routes in turns.\n\n{table}\n")
    return rows


if __name__ == "__main__":
    main()
