"""ms_aten.function: a torch function as a MindSpore Cell, one kernel launch per call."""
from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .base import Signature
from .capture.export import DynamicShapes, FunctionModule, example_like, export
from .capture.structure import Inputs, Node, flat_nodes, output_nodes
from .compile.compiled import (
    CompileOptions,
    compile_exported,
    compile_target_of,
    start_vector_isa_probe,
)
from .lowering.program import Program, build
from .runtime.cell import ProgramCell, call
from .runtime.primitive import AtenFunction
from .stored import key as stored_key
from .stored.store import Stored, captured


class TorchFunction(ProgramCell):
    """A captured torch function: call it on MindSpore tensors in GRAPH (inside a Cell, or
    compiled on its own) or PYNATIVE mode, by position or keyword as the function takes them;
    it returns the function's outputs in their structure (a Tensor when there is one, tuples,
    lists and dicts as they nest: ProgramCell) and is differentiable with respect to every
    floating input. `primitive` is the AtenFunction that runs the whole graph in one kernel
    launch, `program` its capture (ProgramCell). Made from an AtenFunction alone, it takes the
    program's inputs by position and returns its outputs flat. `capture_cache` says what the
    capture cache did for its latest capture ("hit", "stored", or why not; stored/)."""

    def __init__(self, function: AtenFunction, inputs: Inputs | None = None,
                 nodes: tuple[Node, ...] | None = None, capture_cache: str = "off"):
        super().__init__()
        self.capture_cache = capture_cache
        program = function.program
        self._take(inputs or Inputs.by_position(len(program.signature.shapes),
                                               f"ms_aten function '{program.name}'"))
        self._use(function, flat_nodes(program.n_outputs) if nodes is None else nodes)

    def construct(self, *args, **kwargs):
        return self._outputs(call(self._function, (), self._leaves(args, kwargs)), kwargs)


def function(fn: Callable, args: tuple = (), kwargs: Mapping[str, Any] | None = None, *,
             dynamic_shapes: DynamicShapes = None, replace: Sequence = (),
             strict: bool | None = None,
             compile: bool | Mapping[str, Any] = False) -> TorchFunction:
    """`fn` (a callable over torch tensors: torch ops, torch.nn.functional, torch.library ops)
    as a MindSpore Cell that runs it in one kernel launch, captured with torch.export on the
    example call `fn(*args, **kwargs)`: tensors anywhere in args and kwargs are the Cell's
    inputs, the rest constants of the capture; see TorchFunction. `replace`: (pattern,
    replacement[, example_inputs]) tuples, applied at every capture (capture/rewrite.py);
    `fn.program.replaced` counts the matches.

    dynamic_shapes: torch.export's argument, one spec per argument or a dict by argument name
    (`{0: torch.export.Dim("batch", max=64)}`, `Dim.AUTO`, `Dim.DYNAMIC`), nested as the
    inputs nest: one capture then serves every size the ranges allow, with no capture or
    compile per shape.

    strict: torch.export's argument (True: TorchDynamo traces; False: Python runs `fn`); None,
    the default, tries non-strict, then strict.

    compile: True runs `fn` as code AOTInductor compiled ahead of time, cached on disk, with its
    backward compiled too when it takes a floating input; a dict gives options ({"training":
    bool, "cache_dir": path}). What it cannot compile runs interpreted, with a CompileWarning
    (ms_aten.module's compile=).
    """
    name = getattr(fn, "__name__", type(fn).__name__)
    inputs = Inputs.of(fn, args, kwargs, f"ms_aten.function({name})",
                       f"ms_aten function '{name}'", dynamic_shapes)
    module = FunctionModule(fn, tuple(inputs.kwargs))
    options = CompileOptions.of(compile)  # a bad option fails before the capture's seconds
    if options is not None:
        start_vector_isa_probe(options)  # beside the capture
    # The strictness that captured the first time captures every later time.
    strictness = [strict]
    # The Cell, for the cache's answer to a recapture: by a weak reference, as the primitive
    # that keeps the recapture lives as long as a GRAPH-mode graph holding it.
    made: list[weakref.ref[TorchFunction]] = []

    def capture(example: tuple[tuple, dict[str, Any]], first: bool) -> tuple[Stored, str]:
        """The first capture (with the dynamic dims) or a recapture for new static shapes, from
        the capture cache on disk when it holds it (stored/, docs/capture_cache.md); and what
        the cache did."""
        dynamic = inputs.torch_dynamic_shapes("args") if first else None

        def now() -> Stored:
            exported, strictness[0] = export(module, inputs.as_positional(*example), name,
                                             dynamic, replace, strict=strictness[0])
            compiled = None
            if options is not None:
                # By default the backward too, when some input is floating (differentiable).
                compiled = compile_exported(exported, name, options, options.training,
                                            lambda spec: False)
            program = build(exported, name, compiled=compiled, input_names=inputs.names,
                            dim_names=inputs.dim_names if first else None)
            return Stored(program, output_nodes(exported.call_spec.out_spec),
                          bool(strictness[0]))

        def parts() -> stored_key.Parts:
            return stored_key.function_parts(
                fn, cell=TorchFunction, args=example[0], kwargs=example[1],
                dynamic_shapes=dynamic,
                options={"replace": replace, "strict": strict, "compile": options},
                compile_target=None if options is None else compile_target_of(options))

        stored, state = captured(name, parts, now)
        strictness[0] = stored.strict
        return stored, state

    def recapture(signature: Signature) -> Program:
        stored, state = capture(inputs.example(list(example_like(signature))), first=False)
        cell = made[0]() if made else None
        if cell is not None:
            cell.capture_cache = state
        return stored.program

    stored, state = capture((inputs.args, inputs.kwargs), first=True)
    cell = TorchFunction(AtenFunction(stored.program, recapture), inputs, stored.nodes,
                         capture_cache=state)
    made.append(weakref.ref(cell))
    return cell
