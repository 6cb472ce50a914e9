"""ms_aten.function: a torch function as one MindSpore primitive, one kernel launch per call."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from mindspore import ops
from mindspore.common import dtype as mstype

from . import _lib, dtypes
from .binding import SPEC_ATTR
from .grad import with_arity
from .infer import ShapeInferenceError, flatten_infer_args, graph_mode
from .op import unique_id
from .program import RNG_STATE_BYTES, Program, Signature, build, example_like, export

Recapture = Callable[[Signature], Program]


def _tensor_type(dtype: torch.dtype):
    return mstype.TensorType(dtypes.to_ms(dtype))


class ProgramVjp(ops.Custom):
    """The backward of a program in one launch (csrc/program.cpp, Program::vjp).
    Inputs: the program's inputs, one gradient per output, the RNG state (random programs).
    Outputs: one gradient per program input, shaped and typed like it."""

    def __init__(self, program: Program):
        self.program = program
        super().__init__(_lib.kernel(_lib.current_target()), out_shape=self._unused,
                         out_dtype=self._unused, func_type="aot")
        self.add_prim_attr(SPEC_ATTR, program.vjp_spec)
        self.add_prim_attr("ms_aten_uid", unique_id())

    def __infer__(self, *args: dict) -> dict:
        shapes, types = flatten_infer_args(args)
        n_in = self.program.n_inputs
        if n_in == 1:
            return {"shape": shapes[0], "dtype": types[0], "value": None}
        return {"shape": tuple(shapes[:n_in]), "dtype": tuple(types[:n_in]), "value": None}

    def get_bprop(self) -> Callable:
        """A bprop that fails when a gradient of a gradient runs through it. MindSpore may ask
        for it while compiling a first-order gradient, which must go on working, so only
        running it raises."""
        message = (f"ms_aten: {self.program.name} (backward): gradients of order 2 through a "
                   f"whole program are not supported; build the function from ms_aten.op "
                   f"calls, which differentiate to any order")

        def refuse(inputs: tuple, out, dout):
            raise RuntimeError(message)

        n_vjp_inputs = self.program.n_inputs + self.program.n_outputs + self.program.random
        return with_arity(n_vjp_inputs, refuse)

    def _unused(self, *args):
        raise AssertionError("unreachable: ProgramVjp.__infer__ infers shapes")


def make_program_bprop(program: Program) -> Callable:
    """bprop(*inputs, out, dout) for a program: its VJP kernel, one gradient per input."""
    vjp = ProgramVjp(program)
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
    """

    def __init__(self, program: Program, recapture: Recapture | None = None):
        self.program = program
        self.recapture = recapture
        self.siblings: dict[Signature, AtenFunction] = {}
        super().__init__(_lib.kernel(_lib.current_target()), out_shape=self._unused,
                         out_dtype=self._unused, func_type="aot",
                         bprop=make_program_bprop(program))
        self.add_prim_attr(SPEC_ATTR, program.spec)
        self.add_prim_attr("ms_aten_uid", unique_id())

    def __call__(self, *args):
        # PYNATIVE: other input shapes are captured again (once per signature), as torch would
        # simply run them; GRAPH mode never calls __call__, and __infer__ refuses them there.
        if not graph_mode() and self.recapture is not None:
            signature = self.program.user_signature_of(
                [tuple(x.shape) for x in args], [x.dtype for x in args])
            if signature != self.program.signature:
                sibling = self.siblings.get(signature)
                if sibling is None:
                    sibling = AtenFunction(self.recapture(signature), self.recapture)
                    self.siblings[signature] = sibling
                return sibling(*args)
        return super().__call__(*args)

    def __infer__(self, *args: dict) -> dict:
        shapes, types = flatten_infer_args(args)
        program = self.program
        if len(shapes) != program.n_inputs:
            raise TypeError(f"ms_aten function '{program.name}' takes {program.n_inputs} "
                            f"tensors, got {len(shapes)}")
        signature = program.user_signature_of(shapes, types)
        if signature != program.signature:
            raise ShapeInferenceError(
                f"ms_aten function '{program.name}' was captured for inputs "
                f"({program.signature.describe()}) and got ({signature.describe()}); in GRAPH "
                f"mode a program runs the shapes it was captured with (capture one per shape, "
                f"or run in PYNATIVE mode, which captures new shapes by itself)")
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


class _Wrapped(torch.nn.Module):
    """torch.export captures modules; this one calls a plain function."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def function(fn: Callable, example_inputs: tuple) -> AtenFunction:
    """`fn` (a callable over torch tensors: torch ops, torch.nn.functional, torch.library ops)
    as one MindSpore primitive, captured with torch.export on `example_inputs` (torch tensors).

    Call it on MindSpore tensors in GRAPH (inside a Cell) or PYNATIVE mode; it returns a Tensor
    or a tuple, and is differentiable with respect to every floating input.
    """
    if not isinstance(example_inputs, tuple) or not all(
            isinstance(x, torch.Tensor) for x in example_inputs):
        raise TypeError("ms_aten.function: example_inputs must be a tuple of torch tensors")
    name = getattr(fn, "__name__", type(fn).__name__)
    module = _Wrapped(fn)

    def capture(signature: Signature) -> Program:
        return build(export(module, example_like(signature), name), name)

    return AtenFunction(build(export(module, example_inputs, name), name), capture)
