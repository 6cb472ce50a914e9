"""ms_aten.function: a torch function as one MindSpore primitive, one kernel launch per call."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from mindspore import ops
from mindspore.common import dtype as mstype

from ..native import dtypes, library
from ..ops.binding import SPEC_ATTR
from ..ops.grad import with_arity
from ..ops.infer import ShapeInferenceError, flatten_infer_args
from ..ops.primitive import graph_mode, unique_id
from .capture import FunctionModule, example_like, export
from .program import (
    RNG_STATE_BYTES,
    Program,
    Signature,
    build,
    family_spec,
    register,
)

Recapture = Callable[[Signature], Program]


def _tensor_type(dtype: torch.dtype):
    return mstype.TensorType(dtypes.to_ms(dtype))


class _ProgramBackward(ops.Custom):
    """A backward kernel of a program family (`kind`: vjp or vjp2, csrc/program/program.h) whose
    first `n_results` inputs give its outputs' shapes and dtypes."""

    def __init__(self, program: Program, family: str, kind: str, n_results: int):
        self.program = program
        self.family = family
        self.n_results = n_results
        super().__init__(library.kernel(library.current_target()), out_shape=self._unused,
                         out_dtype=self._unused, func_type="aot")
        self.add_prim_attr(SPEC_ATTR, family_spec(kind, program, family))
        self.add_prim_attr("ms_aten_uid", unique_id())

    def __infer__(self, *args: dict) -> dict:
        shapes, types = flatten_infer_args(args)
        n = self.n_results
        if n == 1:
            return {"shape": shapes[0], "dtype": types[0], "value": None}
        return {"shape": tuple(shapes[:n]), "dtype": tuple(types[:n]), "value": None}

    def _refusing_bprop(self, arity: int, message: str) -> Callable:
        """A bprop that raises `message` when it runs. MindSpore may ask for a bprop while
        compiling a gradient of a lower order, which must go on working, so only running it
        raises."""

        def refuse(inputs: tuple, out, dout):
            raise RuntimeError(message)

        return with_arity(arity, refuse)

    def _unused(self, *args):
        raise AssertionError("unreachable: __infer__ infers shapes")


class ProgramVjp(_ProgramBackward):
    """The backward of a program in one launch (csrc/program/program.cpp, Program::vjp).
    Inputs: the program's inputs, one gradient per output, the RNG state (random programs).
    Outputs: one gradient per program input, shaped and typed like it."""

    def __init__(self, program: Program, family: str):
        super().__init__(program, family, "vjp", program.n_inputs)

    def get_bprop(self) -> Callable:
        """The second order: one more launch, ProgramVjp2, differentiating this backward with
        respect to the program's inputs and its incoming output gradients. GRAPH mode only:
        in PYNATIVE, MindSpore's tape does not lead from a Custom op's bprop back to the
        Parameters it read, so a weight's second-order gradient would come out as zeros; the
        bprop refuses there, when it runs (MindSpore asks for it for first orders too)."""
        program = self.program
        n_in, n_out = program.n_inputs, program.n_outputs
        arity = n_in + n_out + program.random
        if not graph_mode():
            return self._refusing_bprop(arity, (
                f"ms_aten: {program.name} (backward): a gradient of a gradient through a whole "
                f"program needs GRAPH mode (a Cell in GRAPH mode, or ms.jit); in PYNATIVE, "
                f"MindSpore would give its weights zero gradients"))
        vjp2 = ProgramVjp2(program, self.family)

        def gradients(inputs: tuple, out, dout):
            cotangents = (dout,) if n_in == 1 else tuple(dout)
            grads = vjp2(*inputs, *cotangents)
            grads = (grads,) if n_in + n_out == 1 else tuple(grads)
            if program.random:  # the RNG state, an integer input, gets a zero gradient
                return grads + (ops.zeros_like(inputs[n_in + n_out]),)
            return grads

        return with_arity(arity, gradients)


class ProgramVjp2(_ProgramBackward):
    """The backward of a program's backward in one launch (Program::vjp2): gradient penalties
    and Hessian-vector products through a whole model. Inputs: ProgramVjp's inputs, then one
    cotangent per program input. Outputs: one gradient per program input, then one per output
    gradient ProgramVjp took."""

    def __init__(self, program: Program, family: str):
        super().__init__(program, family, "vjp2", program.n_inputs + program.n_outputs)

    def get_bprop(self) -> Callable:
        program = self.program
        return self._refusing_bprop(
            2 * program.n_inputs + program.n_outputs + program.random,
            f"ms_aten: {program.name} (second-order backward): gradients of order 3 through a "
            f"whole program are not supported; build the function from ms_aten.op calls, "
            f"which differentiate to any order")


def make_program_bprop(program: Program, family: str) -> Callable:
    """bprop(*inputs, out, dout) for a program family: its VJP kernel, one gradient per input."""
    vjp = ProgramVjp(program, family)
    n_out = program.n_outputs
    bare = program.n_results == 1  # the forward returns a lone Tensor, so does dout
    one_input = program.n_inputs == 1

    def gradients(inputs: tuple, out, dout):
        if program.random:  # the forward's last output: the RNG state the recompute replays
            grads = vjp(*inputs, *dout[:n_out], out[n_out])
        elif bare:
            grads = vjp(*inputs, dout)
        else:
            grads = vjp(*inputs, *dout)
        return (grads,) if one_input else grads

    return with_arity(program.n_inputs, gradients)


class AtenFunction(ops.Custom):
    """A MindSpore primitive that runs a whole captured torch graph in one kernel launch.

    Outputs: the graph's outputs (a Tensor when there is one), then, for a graph with random
    ops (dropout), torch's CPU RNG state as a uint8 Tensor, which the backward replays: as
    MindSpore's own ops.Dropout returns its mask beside its output.

    Inputs of other static shapes are captured again, once per signature, in both modes: as
    torch would simply run them, and as MindSpore compiles a graph per static shape. The
    primitive names a program family in the library, and each launch runs the capture for its
    inputs (csrc/program/family.h).
    """

    def __init__(self, program: Program, recapture: Recapture | None = None):
        self.program = program  # the first capture; every capture has its outputs' structure
        self.recapture = recapture
        self.family = str(unique_id())
        register(self.family, program)
        self.programs: dict[Signature, Program] = {program.signature: program}
        super().__init__(library.kernel(library.current_target()), out_shape=self._unused,
                         out_dtype=self._unused, func_type="aot",
                         bprop=make_program_bprop(program, self.family))
        self.add_prim_attr(SPEC_ATTR, family_spec("call", program, self.family))
        self.add_prim_attr("ms_aten_uid", unique_id())

    def program_for(self, signature: Signature) -> Program:
        """The capture for a signature of the user inputs: captured now if it is new."""
        program = self.programs.get(signature)
        if program is not None:
            return program
        first = self.program
        if any(size < 0 for shape in signature.shapes for size in shape):
            raise ShapeInferenceError(
                f"ms_aten function '{first.name}' got inputs of unknown size "
                f"({signature.describe()}); a program is captured for static shapes: give the "
                f"Cell static inputs (MindSpore compiles once per shape, ms_aten captures once "
                f"per shape)")
        if self.recapture is None:
            raise ShapeInferenceError(
                f"ms_aten function '{first.name}' was captured for inputs "
                f"({first.signature.describe()}) and got ({signature.describe()})")
        program = self.recapture(signature)
        register(self.family, program)
        self.programs[signature] = program
        return program

    def __infer__(self, *args: dict) -> dict:
        shapes, types = flatten_infer_args(args)
        first = self.program
        if len(shapes) != first.n_inputs:
            raise TypeError(f"ms_aten function '{first.name}' takes {first.n_inputs} "
                            f"tensors, got {len(shapes)}")
        program = self.program_for(first.user_signature_of(shapes, types))
        out_shapes: list[Any] = [list(s) for s in program.output_shapes]
        out_types = [_tensor_type(d) for d in program.output_dtypes]
        if program.random:
            out_shapes.append([RNG_STATE_BYTES])
            out_types.append(_tensor_type(torch.uint8))
        if len(out_shapes) == 1:
            return {"shape": out_shapes[0], "dtype": out_types[0], "value": None}
        return {"shape": tuple(out_shapes), "dtype": tuple(out_types), "value": None}

    def _unused(self, *args):
        raise AssertionError("unreachable: AtenFunction.__infer__ infers shapes")


def function(fn: Callable, example_inputs: tuple, replace: Sequence = ()) -> AtenFunction:
    """`fn` (a callable over torch tensors: torch ops, torch.nn.functional, torch.library ops)
    as one MindSpore primitive, captured with torch.export on `example_inputs` (torch tensors).
    `replace`: (pattern, replacement[, example_inputs]) tuples, applied at every capture
    (rewrite.py); `op.program.replaced` counts the matches.

    Call it on MindSpore tensors in GRAPH (inside a Cell) or PYNATIVE mode; it returns a Tensor
    or a tuple, and is differentiable with respect to every floating input.
    """
    if not isinstance(example_inputs, tuple) or not all(
            isinstance(x, torch.Tensor) for x in example_inputs):
        raise TypeError("ms_aten.function: example_inputs must be a tuple of torch tensors")
    name = getattr(fn, "__name__", type(fn).__name__)
    module = FunctionModule(fn)

    def capture(signature: Signature) -> Program:
        return build(export(module, example_like(signature), name, replace), name)

    return AtenFunction(build(export(module, example_inputs, name, replace), name), capture)
