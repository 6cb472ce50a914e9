"""The PYNATIVE fast path of a whole program: its forward and backward kernels run through the
pyboost module (native/pyboost.py), as ms_aten.op's calls do (ops/fast_path.py), instead of
ops.Custom's launch.

A call that autograd does not record runs the forward that keeps nothing; one it records runs
the forward that keeps its autograd graph in a slot that MindSpore's autograd node owns, and
the backward takes that graph: one backward pass, no second forward, and the graph goes with
the node if no backward comes (csrc/pyboost/fast_path.cpp, run_program).
"""
from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, Protocol

from mindspore import Tensor

from ...native import dtypes, pyboost
from ..base import Signature
from ..lowering.program import Program
from .family import family_spec

STATE_ATTR = "_ms_aten_fast_path"


class RoutedProgram(Protocol):
    """What the fast path needs of a program's forward primitive (primitive.py's AtenFunction,
    which routes its PYNATIVE calls here)."""

    program: Program
    family: str
    record: bool  # whether a recorded call keeps its autograd graph for the backward

    def check_count(self, n: int) -> None: ...

    def program_for(self, signature: Signature) -> Program: ...

    def output_shapes(self, shapes: list[list[int]]) -> list[list[int]]: ...


class _ProgramState:
    """A primitive's three kernels (the forward keeping nothing, the forward keeping its graph,
    the VJP), and one Outputs per input signature."""

    def __init__(self, module: ModuleType, function: RoutedProgram) -> None:
        program = function.program
        self.module = module
        self.function = function
        self.call, self.tape, self.vjp = (
            module.Kernel(family_spec(kind, program, function.family), name)
            for kind, name in (("call", program.name),
                               ("tape" if function.record else "call", program.name),
                               ("vjp", f"{program.name} (backward)")))
        # Signature -> Outputs; a signature holds id(dtype) (hashing a MindSpore dtype costs
        # ~1 us), and dtypes_seen keeps those dtype objects alive so that no id is reused.
        self.outputs: dict[tuple, Any] = {}
        self.dtypes_seen: set = set()

    def outputs_for(self, inputs: Sequence[Tensor], key: tuple) -> Any:
        """The Outputs of a call on `inputs` (weights first): the capture for their signature,
        captured now if it is new (a static capture), sized by it."""
        function = self.function
        shapes, types = [list(x.shape) for x in inputs], [x.dtype for x in inputs]
        self.dtypes_seen.update(types)
        function.check_count(len(inputs))
        program = function.program_for(function.program.user_signature_of(shapes, types))
        if program.dynamic:  # checks each size against its range: a ValueError before launch
            out_shapes = function.output_shapes(shapes)
        else:
            out_shapes = program.result_shapes()
        names = [dtypes.spec_name(d) for d in program.result_dtypes()]
        outputs = self.module.Outputs(out_shapes, names, False)
        self.outputs[key] = outputs
        return outputs


@pyboost.clears_executor_on_error
def call(function: RoutedProgram, *inputs: Any) -> tuple[Tensor, ...]:
    """function(*inputs) in PYNATIVE mode through the fast path: the primitive's outputs (the
    graph's, then its states), differentiable through ms.grad / value_and_grad."""
    state = getattr(function, STATE_ATTR, None)
    if state is None:
        state = _ProgramState(pyboost.module(), function)
        setattr(function, STATE_ATTR, state)  # kernels live as long as the primitive
    try:
        key = tuple([(x.shape, id(x.dtype)) for x in inputs])
    except AttributeError:
        kinds = ", ".join(type(x).__name__ for x in inputs)
        raise TypeError(f"ms_aten function '{function.program.name}' takes MindSpore Tensors, "
                        f"got {kinds}") from None
    outputs = state.outputs.get(key)
    if outputs is None:
        outputs = state.outputs_for(inputs, key)
    return state.module.run_program(state.call, state.tape, state.vjp, list(inputs), outputs,
                                    function.program.n_states, function.program.written)
