"""The whole-model benchmark's ms_aten side, in a process of its own. models/run.py and
models/memory.py start it; it prints one RESULT line of JSON.

    .venv/bin/python -m benchmarks.models.worker_ms_aten --model gpt2-tiny [--measure memory
        --route "GRAPH forward+backward"]

The model is `ms_aten.module(model, inputs)`, a MindSpore Cell, on the torch worker's weights
and data. Routes, as users run them:
- GRAPH: the forward as `cell(x)` (the Cell compiled) and as an `ms.jit` function; the forward
  and backward, a jitted `ms.value_and_grad` that returns the loss and the gradients (returning
  only the loss would let MindSpore prune the backward), with the backward from the forward's
  kept autograd graph (the default) and with the recompute fallback; a jitted training step with
  MindSpore's nn.Adam and with ms_aten.optim.Adam; each optimizer's update alone, jitted, on
  gradients already computed.
- PYNATIVE: `cell(x)`; `ms.value_and_grad` unjitted; the training step with either optimizer.
- The loss as ms_aten.nn's loss Cell (AtenLossCell: ms_aten.nn.CrossEntropyLoss, ATen's loss
  as one MindSpore op, in place of MindSpore's ops.cross_entropy): the jitted forward+backward
  and the training step with nn.Adam.
- The loss in the program: the model and its loss captured as one torch module
  (tests/models.WithLoss), so that the loss runs in ATen instead of in MindSpore (LossCell):
  its jitted forward+backward, and its training step with ms_aten.optim.Adam.
Every call ends with MindSpore's executor sync. Before anything is timed, every route is checked
against torch eager's results from a process of its own (models/reference.py): the logits, the
loss and every gradient, and the weights after one step against torch.optim.Adam with
MindSpore's epsilon placement emulated. Each route reports its ms_aten kernel launches per call.
With --compile inference or training, the Cell is ms_aten.module(..., compile=...), and the
capture's wall time and the compile's are reported.
"""
from __future__ import annotations

import copy
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import context, nn

import ms_aten
from benchmarks.common import workers
from benchmarks.common.timing import ms_sync
from benchmarks.common.workers import emit
from benchmarks.models.reference import Reference
from benchmarks.models.workloads import (
    BETAS,
    EPS,
    LR,
    MS_ATEN_ROUTES,
    Task,
    case,
    fingerprint,
    metadata,
    models,
    parse_task,
    peak_memory,
    time_routes,
)
from ms_aten import to_ms

# isort: split
from loss_cell import LossCell  # tests/loss_cell.py; workloads put tests/ on sys.path

GRAPH, PYNATIVE = ms.GRAPH_MODE, ms.PYNATIVE_MODE
MODE_NAMES = {GRAPH: "GRAPH", PYNATIVE: "PYNATIVE"}


@dataclass(frozen=True)
class Route:
    mode: int
    run: Callable[[], object]
    check: Callable[[object], None]

    def call(self) -> object:
        if context._get_mode() != self.mode:
            ms.set_context(mode=self.mode)
        out = self.run()
        ms_sync()
        return out


class AtenLossCell(nn.Cell):
    """LossCell with ms_aten.nn's loss Cell in place of MindSpore's: ATen's cross entropy (or
    mse_loss) as one op, its backward ATen's derivative."""

    def __init__(self, net: nn.Cell, kind: str):
        super().__init__()
        self.net = net
        self.lm = kind == "lm"
        self.loss = ms_aten.nn.MSELoss() if kind == "mse" else ms_aten.nn.CrossEntropyLoss()

    def construct(self, x, target):
        out = self.net(x)
        if isinstance(out, dict):  # an HF model's output, by field name
            out = out["logits"]
        if self.lm:
            return self.loss(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        return self.loss(out, target)


def torch_reference(model: str) -> Reference:
    """torch eager's results, from a process of its own (models/reference.py says why)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "reference.npz"
        workers.run("benchmarks.models.reference", ["--model", model, "--out", str(path)])
        return Reference.load(path)


def close(got: np.ndarray, want: np.ndarray, what: str, rtol: float = 1e-4,
          scale: float | None = None) -> None:
    """Within rtol, or within rtol of `scale` (the largest value of the kind: a gradient whose
    true value is zero holds only rounding noise on both sides)."""
    atol = rtol * (np.abs(want).max() if scale is None else scale) + 1e-7
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def compile_option(task: Task) -> bool | dict:
    """ms_aten.module's compile= for --compile: inference compiles the eval-mode module as it
    is, training its backward too; in a fresh cache unless --cache-dir."""
    if task.compile == "none":
        return False
    if task.compile not in ("inference", "training"):
        raise SystemExit(f"the ms_aten worker compiles for inference or training, not "
                         f"{task.compile}")
    cache_dir = task.cache_dir or tempfile.mkdtemp(prefix="ms_aten_compiled_")
    return {"training": task.compile == "training", "cache_dir": cache_dir}


class Bench:
    """The cell, its data and torch's reference, and the routes over them."""

    def __init__(self, task: Task):
        c = self.case = case(task.model)
        ms.set_context(mode=GRAPH)
        # The module itself, not a copy: torch's reference comes from another process, and a
        # deepcopy's parallel copies would give this process's main thread an OpenMP team of
        # its own beside ms_aten's launch thread's (docs/devices.md).
        start = time.perf_counter()
        self.compile = compile_option(task)
        self.cell = ms_aten.module(c.module, c.inputs, compile=self.compile)
        self.capture_s = time.perf_counter() - start
        self.kind = c.loss
        self.x, self.target = to_ms(c.inputs[0]), to_ms(c.target)
        self.reference = torch_reference(task.model)
        self.names = [p.name for p in self.cell.trainable_params()]
        self.initial = [p.asnumpy().copy() for p in self.cell.trainable_params()]
        self.grad_scale = max(np.abs(g).max() for g in self.reference.grads.values())
        self._with_loss: nn.Cell | None = None

    def restore(self) -> None:
        """Every Cell's weights back to the initial ones (a step changed them)."""
        for cell in filter(None, (self.cell, self._with_loss)):
            for param, value in zip(cell.trainable_params(), self.initial, strict=True):
                param.set_data(ms.Tensor(value))

    def with_loss(self) -> nn.Cell:
        """The model and its loss captured as one program (models.WithLoss): a second capture
        over the same torch weights (compiled as the model is, with --compile), made at its first
        use; its weights are the model's, named under "model."."""
        if self._with_loss is None:
            c = self.case
            # In the model's mode: a new Module is in train mode, and the capture sets the tree.
            model = models.WithLoss(c.module, c.loss).train(c.module.training)
            self._with_loss = ms_aten.module(model, (*c.inputs, c.target), compile=self.compile)
            names = [p.name.removeprefix("model.") for p in
                     self._with_loss.trainable_params()]
            if names != self.names:
                raise AssertionError("the loss program's weights are not the model's")
        return self._with_loss

    def check_logits(self, out) -> None:
        close(models.logits(out).asnumpy(), self.reference.logits, "logits")

    def check_grads(self, out) -> None:
        loss, grads = out
        close(np.array(float(loss)), np.array(self.reference.loss), "loss")
        for name, grad in zip(self.names, grads, strict=True):
            close(grad.asnumpy(), self.reference.grads[name], f"gradient of {name}", rtol=1e-3,
                  scale=self.grad_scale)

    def check_adam_step(self, _out, exact: bool = False, cell: nn.Cell | None = None) -> None:
        """One step from the initial weights changed them as torch's Adam does (with MindSpore's
        epsilon placement, unless `exact`: ms_aten.optim's is torch's) in `cell` (default: the
        model's); the weights go back to the initial ones after the check. Adam divides by
        sqrt(v): where a gradient is rounding noise (below 1e-6 of the largest), its update
        follows the noise, so those elements are left out (as in tests/test_optim.py)."""
        deltas = self.reference.torch_adam_delta if exact else self.reference.adam_delta
        for name, param, initial in zip(self.names, (cell or self.cell).trainable_params(),
                                        self.initial, strict=True):
            signal = np.abs(self.reference.grads[name]) > 1e-6 * self.grad_scale
            # Within 1 % of lr, an update's size.
            close((param.asnumpy() - initial)[signal], deltas[name][signal],
                  f"Adam's update of {name}", rtol=1e-3, scale=10 * LR)
        self.restore()

    def check_torch_adam_step(self, out) -> None:
        self.check_adam_step(out, exact=True)

    def check_program_loss_step(self, out) -> None:
        self.check_adam_step(out, exact=True, cell=self.with_loss())

    def routes(self) -> dict[str, Route]:
        cell, x, target = self.cell, self.x, self.target
        params = cell.trainable_params()
        grad_fn = ms.value_and_grad(LossCell(cell, self.kind), None, params)
        aten_grad_fn = ms.value_and_grad(AtenLossCell(cell, self.kind), None, params)

        @ms.jit
        def forward_jit(tokens):
            return cell(tokens)["logits"]  # MindSpore 2.10's jit returns no dict of a Custom op's

        @ms.jit
        def grad_jit(tokens, labels):
            return grad_fn(tokens, labels)  # the loss and every gradient: nothing is pruned

        @ms.jit
        def aten_grad_jit(tokens, labels):
            return aten_grad_fn(tokens, labels)

        optimizers = {  # name -> (a new optimizer, its check)
            "nn.Adam": (lambda: nn.Adam(params, learning_rate=LR, beta1=BETAS[0],
                                        beta2=BETAS[1], eps=EPS), self.check_adam_step),
            "ms_aten.optim.Adam": (lambda: ms_aten.optim.Adam(params, lr=LR, betas=BETAS,
                                                              eps=EPS),
                                   self.check_torch_adam_step)}
        routes = {
            "GRAPH forward+backward, recompute": Route(GRAPH, self.recompute_grad(),
                                                       self.check_grads),
            "GRAPH forward cell(x)": Route(GRAPH, lambda: cell(x), self.check_logits),
            "GRAPH forward ms.jit": Route(GRAPH, lambda: forward_jit(x), self.check_logits),
            "GRAPH forward+backward": Route(GRAPH, lambda: grad_jit(x, target), self.check_grads),
            "GRAPH forward+backward, ms_aten.nn loss": Route(
                GRAPH, lambda: aten_grad_jit(x, target), self.check_grads),
            "GRAPH step nn.Adam, ms_aten.nn loss": Route(
                GRAPH, self.step(optimizers["nn.Adam"][0](), jit=True, loss=AtenLossCell),
                self.check_adam_step),
            "PYNATIVE forward cell(x)": Route(PYNATIVE, lambda: cell(x), self.check_logits),
            "PYNATIVE forward+backward": Route(PYNATIVE, lambda: grad_fn(x, target),
                                               self.check_grads),
            "GRAPH forward+backward, loss in the program": Route(
                GRAPH, self.loss_in_program(None), self.check_grads),
            "GRAPH step ms_aten.optim.Adam, loss in the program": Route(
                GRAPH, self.loss_in_program(lambda params: ms_aten.optim.Adam(
                    params, lr=LR, betas=BETAS, eps=EPS)), self.check_program_loss_step),
        }
        for name, (make, check) in optimizers.items():
            for mode in (GRAPH, PYNATIVE):
                routes[f"{MODE_NAMES[mode]} step {name}"] = Route(
                    mode, self.step(make(), jit=mode == GRAPH), check)
            routes[f"GRAPH {name} update alone"] = Route(GRAPH, self.update_alone(make(), grad_jit),
                                                         check)
        return routes

    def recompute_grad(self) -> Callable[[], object]:
        """The jitted forward+backward of a second cell over the same weights whose primitive
        keeps no autograd graph (record=False), so that its VJP recomputes the forward: the
        fallback route, timed against the default. Built at the first call (one more capture),
        through ProgramCell's private _use: no public API picks the route."""
        jitted: list = []

        def run():
            if not jitted:
                cell = ms_aten.module(copy.deepcopy(self.case.module), self.case.inputs)
                cell._use(ms_aten.AtenFunction(cell.program, record=False), cell._nodes)
                grad_fn = ms.value_and_grad(LossCell(cell, self.kind), None,
                                            cell.trainable_params())

                @ms.jit
                def grad_jit(tokens, labels):
                    return grad_fn(tokens, labels)
                jitted.append(grad_jit)
            return jitted[0](self.x, self.target)
        return run

    def loss_in_program(self, make_optimizer: Callable[[list], nn.Optimizer] | None
                        ) -> Callable[[], object]:
        """The jitted forward+backward of with_loss() (the loss and every gradient), or with an
        optimizer its training step (the loss); built at the first call."""
        jitted: list = []

        def run():
            if not jitted:
                cell = self.with_loss()
                params = cell.trainable_params()
                grad_fn = ms.value_and_grad(cell, None, params)
                optimizer = make_optimizer(params) if make_optimizer else None

                @ms.jit
                def call(tokens, labels):
                    if optimizer is None:
                        return grad_fn(tokens, labels)
                    loss, grads = grad_fn(tokens, labels)
                    optimizer(grads)
                    return loss
                jitted.append(call)
            return jitted[0](self.x, self.target)
        return run

    def update_alone(self, optimizer: nn.Optimizer, grad_jit) -> Callable[[], object]:
        """The optimizer's update, jitted, on the initial weights' gradients (computed at the
        first call)."""
        grads: list = []
        update = ms.jit(optimizer.construct)  # nn.Adam's construct is jitted already

        def run():
            if not grads:
                grads.extend(grad_jit(self.x, self.target)[1])
            return update(tuple(grads))
        return run

    def step(self, optimizer: nn.Optimizer, jit: bool,
             loss: type[nn.Cell] = LossCell) -> Callable[[], object]:
        grad_fn = ms.value_and_grad(loss(self.cell, self.kind), None, optimizer.parameters)

        def step(tokens, labels):
            loss, grads = grad_fn(tokens, labels)
            optimizer(grads)
            return loss

        compiled = ms.jit(step) if jit else step
        return lambda: compiled(self.x, self.target)


def checked_routes(bench: Bench, only: str | None) -> tuple[dict[str, Callable[[], object]],
                                                          dict[str, int]]:
    """Each route (or `only` that one) run once and checked against torch (compiling it), then
    once more to count its kernel launches; the callables to time."""
    routes = bench.routes()
    if set(routes) != set(MS_ATEN_ROUTES):
        raise AssertionError(f"workloads.MS_ATEN_ROUTES is out of date: {sorted(routes)}")
    if only is not None:
        routes = {only: routes[only]}
    launches = {}
    for name, route in routes.items():
        route.check(route.call())
        before = ms_aten.launch_count()
        route.call()
        launches[name] = ms_aten.launch_count() - before
        bench.restore()
    return {name: route.call for name, route in routes.items()}, launches


def main() -> None:
    task = parse_task(__doc__.splitlines()[0])
    ms.set_device("CPU")
    if task.threads:
        ms_aten.set_num_threads(task.threads)
    bench = Bench(task)
    calls, launches = checked_routes(bench, task.route)
    compiled = bench.cell.program.compiled
    result = {"model": task.model, "nodes": bench.cell.program.n_nodes,
              "compile": task.compile, "capture_s": bench.capture_s,
              "compiled": None if compiled is None else {
                  "seconds": compiled.seconds, "cached": compiled.cached,
                  "training": compiled.training},
              "fingerprint": fingerprint(bench.reference.logits),
              "meta": {**metadata("ms_aten", ms_aten.get_num_threads()),
                       "mindspore": ms.__version__, "ms_aten": ms_aten.__version__},
              "launches": launches}
    if task.measure == "memory":
        result["memory"] = {name: peak_memory(call) for name, call in calls.items()}
    else:
        result["routes"] = time_routes(calls, task.timing)
    emit(result)


if __name__ == "__main__":
    main()
