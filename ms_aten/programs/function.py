"""ms_aten.function: a torch function as a MindSpore Cell, one kernel launch per call."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .capture import (
    DynamicShapes,
    FunctionModule,
    dim_names,
    example_like,
    export,
    input_names,
    per_input,
)
from .cell import ProgramCell
from .primitive import AtenFunction
from .program import Program, Signature, build


class TorchFunction(ProgramCell):
    """A captured torch function: call it on MindSpore tensors in GRAPH (inside a Cell, or
    compiled on its own) or PYNATIVE mode; it returns the function's outputs (a Tensor when
    there is one, else a tuple) and is differentiable with respect to every floating input.
    `primitive` is the AtenFunction that runs the whole graph in one kernel launch, `program`
    its capture (ProgramCell)."""

    def __init__(self, function: AtenFunction):
        super().__init__()
        self._use(function)

    def construct(self, *inputs):
        return self._outputs(self._function(*inputs))


def function(fn: Callable, example_inputs: tuple, dynamic_shapes: DynamicShapes = None,
             replace: Sequence = (), *, strict: bool | None = None) -> TorchFunction:
    """`fn` (a callable over torch tensors: torch ops, torch.nn.functional, torch.library ops)
    as a MindSpore Cell that runs it in one kernel launch, captured with torch.export on
    `example_inputs` (torch tensors); see TorchFunction. `replace`: (pattern, replacement[,
    example_inputs]) tuples, applied at every capture (rewrite.py); `fn.program.replaced`
    counts the matches.

    dynamic_shapes: torch.export's argument, one spec per input or a dict by argument name
    (`{0: torch.export.Dim("batch", max=64)}`, `Dim.AUTO`, `Dim.DYNAMIC`): one capture then
    serves every size the ranges allow, with no capture or compile per shape.

    strict: torch.export's argument (True: TorchDynamo traces; False: Python runs `fn`); None,
    the default, tries non-strict, then strict.
    """
    if not isinstance(example_inputs, tuple) or not all(
            isinstance(x, torch.Tensor) for x in example_inputs):
        raise TypeError("ms_aten.function: example_inputs must be a tuple of torch tensors")
    name = getattr(fn, "__name__", type(fn).__name__)
    module = FunctionModule(fn)
    names = input_names(fn, len(example_inputs))
    try:
        specs = per_input(dynamic_shapes, names)
    except TypeError as error:
        raise TypeError(f"ms_aten.function({name}): {error}") from None

    # FunctionModule.forward takes `*args`, for which torch.export wants the specs as one tuple.
    exported, strict = export(module, example_inputs, name,
                              None if specs is None else (tuple(specs),), replace, strict)

    def capture(signature: Signature) -> Program:
        return build(export(module, example_like(signature), name, replace=replace,
                            strict=strict)[0], name, input_names=names)

    return TorchFunction(AtenFunction(
        build(exported, name, dim_names=dim_names(specs), input_names=names), capture))
