"""The primitives of a captured program: its forward (AtenFunction), one kernel launch per call,
and its backward kernels (ProgramVjp, ProgramVjp2)."""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from mindspore import ops
from mindspore.common import dtype as mstype
from mindspore.ops import signature as sig

from ...native import dtypes, library, memory, pyboost, threads
from ...ops.binding import SPEC_ATTR
from ...ops.grad import with_arity
from ...ops.infer import ShapeInferenceError, flatten_infer_args
from ...ops.primitive import graph_mode, unique_id
from ..base import Signature
from ..lowering.program import Program
from . import fast_path
from .family import family_spec, output_shapes, register

Recapture = Callable[[Signature], Program]
_SHAPES_KEPT = 64  # input-shape signatures whose output shapes an AtenFunction remembers


def _register(family: str, program: Program) -> None:
    """Hands a capture to the library. The capture's torch work, like the model's construction
    before it, left this thread an OpenMP team, idle from now on: its workers are given back,
    so that the launch thread's is the process's one team (csrc/launch/launch_thread.h); and the
    memory its temporaries freed goes back to the system (memory.release_free_heap)."""
    register(family, program)
    threads.release_idle_team()
    memory.release_free_heap()


def _forget(family: str) -> None:
    """Drops a family's programs from the library (their constants with them), once its
    primitive is freed."""
    library.load().ms_aten_program_forget(family.encode())


def _tensor_type(dtype: torch.dtype):
    return mstype.TensorType(dtypes.to_ms(dtype))


def _result(shapes: list[Any], types: list[Any]) -> dict:
    """__infer__'s answer: a lone output as itself, several as tuples."""
    if len(shapes) == 1:
        return {"shape": shapes[0], "dtype": types[0], "value": None}
    return {"shape": tuple(shapes), "dtype": tuple(types), "value": None}


class _ProgramPrimitive(ops.Custom):
    """An ops.Custom over a kernel of a program family (csrc/program/family.h): `kind` is call,
    vjp or vjp2. A capture with dynamic shapes has its output shapes from the library's C++
    shape hook, at compile time (-1 where a size is not known yet) and before each launch of a
    graph whose sizes change; a static one from __infer__ (one capture per input signature)."""

    def __init__(self, program: Program, family: str, kind: str, n_results: int, bprop=None):
        self.program = program
        self.family = family
        multi_output = program.dynamic and n_results > 1
        super().__init__(library.kernel(library.current_target(), multi_output),
                         out_shape=None if program.dynamic else self._unused,
                         out_dtype=self._unused, func_type="aot", bprop=bprop)
        self.add_prim_attr(SPEC_ATTR, family_spec(kind, program, family))
        self.add_prim_attr("ms_aten_uid", unique_id())
        if program.dynamic:
            # MindSpore picks the hook's return type by this flag (csrc/boundary/extra_abi0.cpp),
            # and its C++ inference reads reg_op_name.
            self.multi_output = multi_output
            self.add_prim_attr("multi_output", multi_output)
            self.add_prim_attr("reg_op_name", program.name)

    def _unused(self, *args):
        raise AssertionError("unreachable: __infer__ infers shapes")


class _ProgramBackward(_ProgramPrimitive):
    """A backward kernel of a program family (`kind`: vjp or vjp2, csrc/program/program.h)
    whose first `n_results` inputs give its outputs' shapes and dtypes."""

    def __init__(self, program: Program, family: str, kind: str, n_results: int):
        self.n_results = n_results
        super().__init__(program, family, kind, n_results)

    def __infer__(self, *args: dict) -> dict:
        shapes, types = flatten_infer_args(args)
        return _result(shapes[:self.n_results], types[:self.n_results])

    def _refusing_bprop(self, arity: int, message: str) -> Callable:
        """A bprop that raises `message` when it runs. MindSpore may ask for a bprop while
        compiling a gradient of a lower order, which must go on working, so only running it
        raises."""

        def refuse(inputs: tuple, out, dout):
            raise RuntimeError(message)

        return with_arity(arity, refuse)


class ProgramVjp(_ProgramBackward):
    """The backward of a program in one launch (csrc/program/program.cpp, Program::vjp): one
    backward pass over the autograd graph its forward kept, or a recompute without one.
    Inputs: the program's inputs, one gradient per output, then the forward's states (the RNG
    state of a random program, the handle of the kept graph). Outputs: one gradient per program
    input, shaped and typed like it."""

    def __init__(self, program: Program, family: str):
        super().__init__(program, family, "vjp", program.n_inputs)

    def get_bprop(self) -> Callable:
        """The second order: one more launch, ProgramVjp2, differentiating this backward with
        respect to the program's inputs and its incoming output gradients. GRAPH mode only:
        in PYNATIVE, MindSpore's tape does not lead from a Custom op's bprop back to the
        Parameters it read, so a weight's second-order gradient would come out as zeros; the
        bprop refuses there, when it runs (MindSpore asks for it for first orders too)."""
        program = self.program
        n_in, n_out, n_states = program.n_inputs, program.n_outputs, program.n_states
        arity = n_in + n_out + n_states
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
            for state in inputs[n_in + n_out:]:  # integers, with zero gradients
                grads = grads + (ops.zeros_like(state),)
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
            2 * program.n_inputs + program.n_outputs + program.n_states,
            f"ms_aten: {program.name} (second-order backward): gradients of order 3 through a "
            f"whole program are not supported; build the function from ms_aten.op calls, "
            f"which differentiate to any order")


def make_program_bprop(program: Program, family: str, check: Callable | None = None
                       ) -> Callable:
    """bprop(*inputs, out, dout) for a program family: its VJP kernel, one gradient per input.
    The forward's outputs after the graph's are states the VJP takes as they are (the RNG state,
    the kept graph's handle), not their gradients. `check`: verify.py's check_gradients op,
    given the output gradients and the gradients, before they are returned."""
    vjp = ProgramVjp(program, family)
    n_out = program.n_outputs
    one_input = program.n_inputs == 1

    def gradients(inputs: tuple, out, dout):
        grads = vjp(*inputs, *dout[:n_out], *out[n_out:])
        return (grads,) if one_input else grads

    if check is None:
        return with_arity(program.n_inputs, gradients)
    verify: Callable = check

    def checked_gradients(inputs: tuple, out, dout):
        grads = vjp(*inputs, *dout[:n_out], *out[n_out:])
        grads = (grads,) if one_input else grads
        return ops.depend(grads, verify(*dout[:n_out], *grads))

    return with_arity(program.n_inputs, checked_gradients)


class AtenFunction(_ProgramPrimitive):
    """A MindSpore primitive that runs a whole captured torch graph in one kernel launch.

    Outputs: the graph's outputs, then the states its backward takes: for a graph with random
    ops (dropout), torch's CPU RNG state as a uint8 Tensor, which a recomputing backward
    replays (as MindSpore's own ops.Dropout returns its mask beside its output), and the handle
    of the autograd graph the forward kept for its backward (int64 [1]; 0 for none). A kernel of
    a `record` primitive keeps its graph until its backward takes it; one that finds its last
    graph not taken at its next launch (MindSpore compiled it without a backward) keeps none
    from then on (csrc/program/family.h). TorchFunction and TorchModule return the graph's
    outputs alone.

    A capture with dynamic shapes (torch.export's dynamic_shapes) serves every size its
    ranges allow, in both modes, GRAPH mode with unknown sizes too. A static capture serves its
    own input signature, and inputs of other static shapes are captured again, once per
    signature, in both modes: as torch would simply run them, and as MindSpore compiles a graph
    per static shape. The primitive names a program family in the library, and each launch runs
    the capture for its inputs (csrc/program/family.h).
    """

    def __init__(self, program: Program, recapture: Recapture | None = None, record: bool = True,
                 verifier: Any = None):
        self.recapture = recapture
        self.record = record  # keep the forward's autograd graph for the backward
        # verify.py's Verifier: its check in the bprop; while it is active, PYNATIVE calls
        # take ops.Custom's route, whose bprop is this Python one (the fast path's is C++).
        self.verifier = verifier
        family = str(unique_id())
        _register(family, program)
        weakref.finalize(self, _forget, family).atexit = False
        self.programs: dict[Signature, Program] = {program.signature: program}
        # output_shapes' answers by input shapes: a GRAPH call from Python checks its sizes
        # each time (0.4 ms for GPT-2 small's 172 weights), and a decoding loop repeats them.
        self._shapes: dict[tuple[tuple[int, ...], ...], list[list[int]]] = {}
        # the first capture; every capture has its outputs' structure
        check = None if verifier is None else verifier.backward_op(program)
        super().__init__(program, family, "record" if record else "call", program.n_results,
                         bprop=make_program_bprop(program, family, check))
        if program.written:
            self._declare_writes(program)

    def _declare_writes(self, program: Program) -> None:
        """The buffers the program updates in place (program.written) are a memory side
        effect, as ms_aten.optim's MutatingOp declares: a RW_WRITE signature per written input,
        so GRAPH mode orders the call among the loads and stores of those Parameters and a read
        after it sees the new values; the written inputs must be Parameters there."""
        self.set_signatures(self._fill_signature(tuple(
            sig.make_sig(f"input{i}", sig.sig_rw.RW_WRITE if i in program.written
                         else sig.sig_rw.RW_READ)
            for i in range(program.n_inputs))))
        self.add_prim_attr("side_effect_mem", True)

    def program_for(self, signature: Signature) -> Program:
        """The capture for a signature of the user inputs: captured now if it is new (and the
        capture static); ValueError when a dynamic capture cannot take it."""
        first = self.program
        if first.dynamic:
            why = first.signature.mismatch(signature)
            if why is not None:
                raise ValueError(f"ms_aten function '{first.name}' got {why}")
            return first
        program = self.programs.get(signature)
        if program is not None:
            return program
        if any(size is None or size < 0 for shape in signature.shapes for size in shape):
            raise ShapeInferenceError(
                f"ms_aten function '{first.name}' got inputs of unknown size "
                f"({signature.describe()}), but was captured for static shapes: capture it with "
                f"dynamic_shapes (torch.export's argument) for one program of every size, or "
                f"give the Cell static inputs (one capture per shape)")
        if self.recapture is None:
            raise ShapeInferenceError(
                f"ms_aten function '{first.name}' was captured for inputs "
                f"({first.signature.describe()}) and got ({signature.describe()})")
        program = self.recapture(signature)
        _register(self.family, program)
        self.programs[signature] = program
        return program

    def replace(self, programs: dict[Signature, Program]) -> str | None:
        """Runs `programs` (new captures of this primitive's signatures) from the next launch of
        every kernel of the family, in every graph that holds the primitive (the library's
        registration replaces them: csrc/program/family.h); or, without replacing anything,
        why they cannot: what MindSpore compiled for the old outputs would not fit."""
        for signature, program in programs.items():
            old = self.programs[signature]
            if (program.n_results, program.n_states, program.written, program.dynamic,
                    program.result_dtypes()) != (old.n_results, old.n_states, old.written,
                                                 old.dynamic, old.result_dtypes()) \
                    or (not program.dynamic and program.result_shapes() != old.result_shapes()):
                return f"its outputs for inputs ({signature.describe()}) changed"
        for signature, program in programs.items():
            _register(self.family, program)
            self.programs[signature] = program
            if signature == self.program.signature:
                self.program = program
        self._shapes.clear()
        return None

    def output_shapes(self, shapes: list[list[int]]) -> list[list[int]]:
        """A dynamic capture's output shapes for inputs of these shapes (weights first; -1 for
        a size not known yet); ValueError naming an input size outside its range."""
        key = tuple(map(tuple, shapes))
        known = self._shapes.get(key)
        if known is None:
            try:
                known = output_shapes(self.attrs[SPEC_ATTR], shapes)
            except ValueError as error:  # the library names the input, the dim, size and range
                raise ValueError(f"ms_aten function '{self.program.name}': {error}") from None
            if len(self._shapes) >= _SHAPES_KEPT:  # every prompt length is a key: stay small
                self._shapes.clear()
            self._shapes[key] = known
        return [list(shape) for shape in known]

    def __call__(self, *args):
        if self.direct():
            return fast_path.call(self, *args)
        return super().__call__(*args)

    def direct(self) -> bool:
        """Whether a call from Python, in either mode, runs through the pyboost fast path
        (fast_path.py), which also keeps the forward's autograd graph for the backward exactly
        when PYNATIVE's autograd records the call: on CPU, unless a Verifier is active. A graph
        MindSpore compiles never calls __call__ (the primitive is compiled, on the AOT
        kernel)."""
        return library.current_target() == "CPU" and pyboost.available() \
            and not (self.verifier is not None and self.verifier.active)

    def check_count(self, n: int) -> None:
        """TypeError naming the user inputs unless a call gives n = weights + inputs tensors."""
        first = self.program
        if n != first.n_inputs:
            weights = f" (besides its {first.n_weights} weights)" if first.n_weights else ""
            raise TypeError(f"ms_aten function '{first.name}' takes {len(first.input_names)} "
                            f"input{'s' if len(first.input_names) != 1 else ''} "
                            f"({', '.join(first.input_names)}){weights}, "
                            f"got {n - first.n_weights}")

    def __infer__(self, *args: dict) -> dict:
        shapes, types = flatten_infer_args(args)
        first = self.program
        self.check_count(len(shapes))
        program = self.program_for(first.user_signature_of(shapes, types))
        if program.dynamic:
            out_shapes: list[Any] = self.output_shapes(shapes)
        else:
            out_shapes = program.result_shapes()
        out_types = [_tensor_type(d) for d in program.result_dtypes()]
        return _result(out_shapes, out_types)
