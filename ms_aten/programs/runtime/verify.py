"""ms_aten.module(..., verify=True): torch eager beside a Cell's first calls, for what no list of
constructs foresees (docs/verify.md).

For each of the first N calls, the Cell's inputs and weights (its Parameters' values at the
call) are kept before the program runs; after it, torch eager runs the torch module on them
(torch.func.functional_call: the module's own tensors are neither read nor written), in the
Cell's tree of modes and, for a program with random ops, from the RNG state the program drew
from; each output is compared. In the backward the program's gradients are compared with torch
autograd's over that eager graph, given the same incoming gradients. The first value or
gradient beyond the tolerance of its dtype (TOLERANCES) raises VerificationError naming the
output (its pytree path) or the weight or input (by name).

Both modes run the same three MindSpore ops (Custom of func_type "pyfunc", whose Python runs
at each launch, in a compiled graph too): `keep` before the program, `check` after it, and
`check_gradients` in the program's bprop (primitive.py). After N calls they return at once; a
PYNATIVE call then takes the fast path again, while a GRAPH-mode graph keeps the three ops (it
was compiled with them).
"""
from __future__ import annotations

import linecache
import os
from collections.abc import Callable, Sequence
from typing import Any

import mindspore as ms
import numpy as np
import torch
from mindspore import ops
from torch.utils import _pytree as pytree

from ..capture.structure import Inputs
from ..lowering.program import Program

ENV = "MS_ATEN_VERIFY"
DEFAULT_CALLS = 3
# (rtol, atol) by dtype: a value or gradient differs when |ms - torch| > atol + rtol * |torch|
# (torch.testing.assert_close's rule). Others (integers, bool) must be equal.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
}


class VerificationError(RuntimeError):
    """A value or gradient of a Cell verified against torch eager (verify=) differs beyond its
    dtype's tolerance."""


def calls_to_verify(verify: bool | int | None) -> int:
    """How many calls to verify: verify=True -> DEFAULT_CALLS, an int -> that many, False -> 0,
    None -> the environment variable MS_ATEN_VERIFY (an integer N, or 1/true/yes/on for the
    default; unset, 0 or false: none), read now."""
    if verify is None:
        text = os.environ.get(ENV, "").strip().lower()
        if text in ("", "0", "false", "no", "off"):
            return 0
        if text in ("true", "yes", "on"):
            return DEFAULT_CALLS
        try:
            verify = int(text)
        except ValueError:
            raise ValueError(f"ms_aten: {ENV}={text!r}: expected a number of calls to verify, "
                             f"or true/false") from None
    if verify is True:
        return DEFAULT_CALLS
    if verify is False:
        return 0
    if not isinstance(verify, int) or verify < 0:
        raise ValueError(f"ms_aten.module: verify must be a bool or a number of calls, got "
                         f"{verify!r}")
    return verify


def _pyfunc(arity: int, body: Callable[[tuple], None], name: str) -> ops.Custom:
    """A Custom op of func_type "pyfunc" calling body(arrays) and returning a float32 [1] zero,
    with zero gradients. MindSpore reads the function's arity from its parameters, so the
    function is generated for each (as ops/grad.py's with_arity)."""
    params = [f"x{i}" for i in range(arity)]
    packed = f"({', '.join(params)}{',' if arity == 1 else ''})"
    source = (f"def make(body, zero, zeros_like):\n"
              f"    def {name}({', '.join(params)}):\n"
              f"        body({packed})\n"
              f"        return zero\n"
              f"    def bprop({', '.join([*params, 'out', 'dout'])}):\n"
              f"        return {', '.join(f'zeros_like({p})' for p in params)}"
              f"{',' if arity == 1 else ''}\n"
              f"    return {name}, bprop\n")
    filename = f"<ms_aten verify/{name}/{arity}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": __name__}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 (fixed template)
    function, bprop = namespace["make"](body, np.zeros((1,), np.float32), ops.zeros_like)
    return ops.Custom(function, out_shape=lambda *shapes: [1],
                      out_dtype=lambda *types: ms.float32, func_type="pyfunc", bprop=bprop)


def _torch(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array, copy=True))


def _differs(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """Why `got` is not `want` within want's dtype's tolerance, or None."""
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {list(got.shape)} != torch's {list(want.shape)}"
    rtol, atol = TOLERANCES.get(want.dtype, (0.0, 0.0))
    got, want = got.to(torch.float64), want.detach().to(torch.float64)
    bad = ~torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    index = tuple(int(i) for i in bad.nonzero()[0])
    return (f"{int(bad.sum())} of {bad.numel()} elements differ, first at {list(index)}: "
            f"{got[index].item():.8g} vs torch's {want[index].item():.8g} (rtol {rtol}, "
            f"atol {atol})")


class Verifier:
    """Verifies a TorchModule's first `calls` calls and backward passes against torch eager."""

    def __init__(self, module: torch.nn.Module, name: str, weight_names: Sequence[str],
                 trainable: frozenset[str], inputs: Inputs, calls: int,
                 modes: Callable[[], dict[str, bool]],
                 verified_all: Callable[[], None] = lambda: None) -> None:
        self.module = module
        self.name = name
        self.weight_names = tuple(weight_names)
        self.trainable = trainable
        self.inputs = inputs
        self.calls = calls  # forward calls left to verify
        self.backwards = calls  # backward passes left to verify
        self.modes = modes  # each submodule's mode (by name) in the Cell's current mode
        self.verified_all = verified_all  # called once the last call is verified
        self.done = 0  # calls verified so far
        self._kept: tuple[list[np.ndarray], list[np.ndarray]] | None = None
        # The last verified call's eager graph, for its backward: outputs, leaves, leaf names.
        self._graph: tuple[list[torch.Tensor], list[torch.Tensor], list[str]] | None = None
        self._ops: dict[tuple[int, int, bool], tuple[ops.Custom, ops.Custom]] = {}
        self._backward_ops: dict[tuple[int, int], ops.Custom] = {}

    @property
    def active(self) -> bool:
        """Whether calls are left to verify (a verified call's backward is checked too: it runs
        the bprop of the route the call took)."""
        return self.calls > 0

    def forward_ops(self, program: Program) -> tuple[ops.Custom, ops.Custom]:
        """(keep, check) for a program: keep(*weights, *inputs), check(*results)."""
        key = (program.n_inputs, program.n_results, program.random)
        if key not in self._ops:
            n_weights = len(self.weight_names)
            self._ops[key] = (
                _pyfunc(program.n_inputs, lambda arrays: self._keep(arrays, n_weights),
                        "keep"),
                _pyfunc(program.n_results,
                        lambda arrays: self._check(arrays, program.n_outputs, program.random),
                        "check"))
        return self._ops[key]

    def backward_op(self, program: Program) -> ops.Custom:
        """check_gradients(*output_gradients, *input_gradients) for a program's bprop."""
        key = (program.n_outputs, program.n_inputs)
        if key not in self._backward_ops:
            self._backward_ops[key] = _pyfunc(
                program.n_outputs + program.n_inputs,
                lambda arrays: self._check_gradients(arrays, program.n_outputs),
                "check_gradients")
        return self._backward_ops[key]

    def _keep(self, arrays: tuple[np.ndarray, ...], n_weights: int) -> None:
        if self.calls > 0:
            copies = [np.array(a, copy=True) for a in arrays]
            self._kept = (copies[:n_weights], copies[n_weights:])

    def _check(self, results: tuple[np.ndarray, ...], n_outputs: int, random: bool) -> None:
        if self.calls <= 0 or self._kept is None:
            return
        self.calls -= 1
        self.done += 1
        if self.calls == 0:
            self.verified_all()
        weights, inputs = self._kept
        self._kept = None
        rng = _torch(results[n_outputs]) if random else None
        outputs, leaves, names, paths = self._reference(weights, inputs, rng)
        if len(outputs) != n_outputs:
            raise VerificationError(f"{self._what()}: torch eager returns {len(outputs)} "
                                    f"tensors, the program {n_outputs}")
        for path, got, want in zip(paths, results[:n_outputs], outputs, strict=True):
            why = _differs(_torch(got), want)
            if why is not None:
                raise VerificationError(f"{self._what()}: output {path} differs from torch "
                                        f"eager's: {why}")
        self._graph = (outputs, leaves, names) if leaves else None

    def _check_gradients(self, arrays: tuple[np.ndarray, ...], n_outputs: int) -> None:
        graph, self._graph = self._graph, None
        if self.backwards <= 0 or graph is None:
            return
        self.backwards -= 1
        outputs, leaves, names = graph
        pairs = [(o, _torch(g).to(o.dtype)) for o, g in zip(outputs, arrays[:n_outputs],
                                                             strict=True)
                 if o.requires_grad]
        if not pairs:
            return
        want = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs],
                                   allow_unused=True)
        names_in_program = [*self.weight_names, *self.inputs.names]
        for name, leaf, expected in zip(names, leaves, want, strict=True):
            got = _torch(arrays[n_outputs + names_in_program.index(name)])
            why = _differs(got, torch.zeros_like(leaf) if expected is None else expected)
            if why is not None:
                kind = "weight" if name in self.weight_names else "input"
                raise VerificationError(f"{self._what()}, backward: the gradient of {kind} "
                                        f"'{name}' differs from torch autograd's: {why}")

    def _what(self) -> str:
        return f"ms_aten.module({self.name}) verified against torch eager, call {self.done}"

    def _reference(self, weights: list[np.ndarray], inputs: list[np.ndarray],
                   rng: torch.Tensor | None
                   ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[str], list[str]]:
        """torch eager on these weights and inputs, in the Cell's modes: its output tensors (in
        the program's order), the leaves a gradient is compared for and their names, and each
        output's pytree path."""
        named = {name: _torch(w) for name, w in zip(self.weight_names, weights, strict=True)}
        tensors = [_torch(x) for x in inputs]
        leaves, names = [], []
        for name, tensor in [*named.items(), *zip(self.inputs.names, tensors, strict=True)]:
            if tensor.is_floating_point() and (name in self.trainable
                                               or name not in named):
                tensor.requires_grad_(True)
                leaves.append(tensor)
                names.append(name)
        args, kwargs = self.inputs.example(tensors)
        module = self.module
        modes = self.modes()
        before = {m: m.training for m in module.modules()}
        state = torch.get_rng_state() if rng is not None else None
        try:
            for path, m in module.named_modules():
                m.training = modes[path]
            if rng is not None:
                torch.set_rng_state(rng)
            with torch.enable_grad():
                out = torch.func.functional_call(module, named, args, kwargs)
        finally:
            for m, mode in before.items():
                m.training = mode
            if state is not None:
                torch.set_rng_state(state)
        flat, _ = pytree.tree_flatten_with_path(out)
        found = [(pytree.keystr(path) or "output", value) for path, value in flat
                 if isinstance(value, torch.Tensor)]
        return [v for _, v in found], leaves, names, [p for p, _ in found]


def verified_call(function, keep, check, weights, inputs):
    """function(*weights, *inputs) between keep and check (graph syntax, as runtime/cell.py's
    call): keep runs first (the program's first input waits for it), check after."""
    kept = keep(*weights, *inputs)
    first = ops.depend(inputs[0], kept)
    results = function(*weights, first, *inputs[1:])
    checked = check(*results)
    return ops.depend(results, checked)
