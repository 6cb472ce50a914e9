"""ms_aten.module: a torch.nn.Module as a MindSpore Cell whose weights are MindSpore Parameters."""
from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from mindspore import Parameter, ParameterTuple

from ..native.convert import to_ms, to_torch
from .capture import DynamicShapes, example_like, export
from .cell import ProgramCell, call
from .compiled import CompileOptions, compile_exported, start_vector_isa_probe
from .primitive import AtenFunction
from .program import Program, Signature, build
from .structure import Inputs, Node, output_nodes


class TorchModule(ProgramCell):
    """A torch module's forward as one ms_aten program (one kernel launch), with every torch
    parameter a MindSpore Parameter of the same name (`trainable_params()` go straight to a
    MindSpore optimizer) and every buffer a non-trainable Parameter.

    The Cell starts in the torch module's mode (`module.training`); `set_train(mode)` captures
    the other mode's graph once. Buffers the graph updates (a KV cache, BatchNorm's running
    statistics in train mode) are written in place, into their Parameters (inplace.py).

    Called as the module is, by position or keyword (`cell(input_ids=x, attention_mask=m)`),
    with the inputs nested as at capture; the constants of the capture (use_cache=False) may
    be left out. Returns the module's outputs in their structure: a HuggingFace ModelOutput or
    a dict as a dict by field name (`out["logits"]`), tuples and lists as they nest, a lone
    tensor as a Tensor (ProgramCell).

    In either mode a forward that a backward follows keeps its autograd graph for it, which then
    runs one backward pass and no second forward; inference keeps nothing (csrc/program/saved.h):
    an eval-mode module differentiated (a fine-tuning without dropout, a saliency map) is not
    inference.

    Captured with `dynamic_shapes` (torch.export's argument), one program serves every size its
    ranges allow, and the Cell declares the dynamic sizes to MindSpore (`set_inputs` with None
    there), so GRAPH mode compiles it once too. `replace`: (pattern, replacement[,
    example_inputs]) tuples applied at every capture (rewrite.py); `cell.program.replaced`
    counts the matches. `strict`: torch.export's argument; None tries non-strict, then strict.
    `compile`: True (or a dict of options) runs each capture as code AOTInductor compiled
    (compiled.py); `cell.program.compiled` says what that took.
    """

    # Whether a forward that a backward follows keeps its autograd graph (AtenFunction).
    _record = True

    def __init__(self, module: torch.nn.Module, args: tuple = (),
                 kwargs: Mapping[str, Any] | None = None, *,
                 dynamic_shapes: DynamicShapes = None, replace: Sequence = (),
                 strict: bool | None = None, compile: bool | Mapping[str, Any] = False):
        super().__init__()
        self._compile = CompileOptions.of(compile)
        if self._compile is not None:
            start_vector_isa_probe(self._compile)  # beside the capture
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ms_aten.module expects a torch.nn.Module, "
                            f"got {type(module).__name__}")
        self._torch_module = module
        self._replace = replace
        self._strict = strict
        self._name = type(module).__name__
        self._take(Inputs.of(module.forward, args, kwargs, f"ms_aten.module({self._name})",
                             f"'{self._name}'", dynamic_shapes))
        named = [*module.named_parameters(), *module.named_buffers()]
        self._weight_names = tuple(name for name, _ in named)
        self._trainable = frozenset(name for name, p in module.named_parameters()
                                    if p.requires_grad)
        self.weights = ParameterTuple(
            Parameter(to_ms(t), name=name, requires_grad=name in self._trainable)
            for name, t in named)
        # Other names of one tensor (tied weights) -> its name here; they share one Parameter.
        by_tensor = {id(t): name for name, t in named}
        self._aliases = {alias: by_tensor[id(t)] for alias, t in [
            *module.named_parameters(remove_duplicate=False),
            *module.named_buffers(remove_duplicate=False)] if by_tensor[id(t)] != alias}
        self._state_keys = {key: by_tensor[id(t)]
                            for key, t in module.state_dict(keep_vars=True).items()
                            if id(t) in by_tensor}
        self._weight_shapes = [list(p.shape) for p in self.weights]
        self._functions: dict[bool, tuple[AtenFunction, tuple[Node, ...]]] = {}
        super().set_train(module.training)
        self._select(module.training)

    def _capture(self, training: bool, example: tuple[tuple, dict[str, Any]]
                 ) -> tuple[Program, tuple[Node, ...]]:
        module = self._torch_module
        # Each submodule's own mode comes back afterwards: module.train() would set them all to
        # the top's (a new wrapper around an eval-mode model is in train mode).
        modes = {m: m.training for m in module.modules()}
        module.train(training)
        inputs = self._inputs
        try:
            # The strictness that captured the first time captures every later time.
            exported, self._strict = export(module, example[0], self._name,
                                            inputs.torch_dynamic_shapes("forward"),
                                            self._replace, example[1], self._strict)
        finally:
            for m, mode in modes.items():
                m.training = mode
        compiled = None
        if self._compile is not None:
            training = training if self._compile.training is None else self._compile.training
            compiled = compile_exported(
                exported, self._name, self._compile, training,
                lambda spec: self._aliases.get(spec.target or "", spec.target) in self._trainable)
        program = build(exported, self._name, self._weight_names, self._trainable,
                        self._aliases, dim_names=inputs.dim_names, input_names=inputs.names,
                        compiled=compiled)
        return program, output_nodes(exported.call_spec.out_spec)

    def _select(self, training: bool) -> None:
        if training not in self._functions:
            # The primitive keeps its recapture, and a GRAPH-mode graph keeps the primitive until
            # the Cell is freed: the Cell by a weak reference, or it would never be.
            cell, name = weakref.ref(self), self._name

            def recapture(signature: Signature) -> Program:
                this = cell()
                if this is None:
                    raise RuntimeError(f"ms_aten.module({name}): the Cell is gone, and "
                                       f"its primitive cannot capture new input shapes")
                return this._capture(training, this._inputs.example(
                    list(example_like(signature))))[0]

            program, nodes = self._capture(training, (self._inputs.args, self._inputs.kwargs))
            self._functions[training] = (
                AtenFunction(program, recapture, record=self._record), nodes)
        function, nodes = self._functions[training]
        self._use(function, nodes)

    def set_train(self, mode: bool = True) -> TorchModule:
        super().set_train(mode)
        self._select(mode)
        return self

    def construct(self, *args, **kwargs):
        return self._outputs(call(self._function, self.weights, self._leaves(args, kwargs)), kwargs)

    def torch_state_dict(self) -> dict[str, torch.Tensor]:
        """The current weights as the torch module's state dict (same keys), so a model trained
        in MindSpore goes back with `module.load_state_dict(cell.torch_state_dict())`."""
        values = {name: to_torch(p.value())
                  for name, p in zip(self._weight_names, self.weights, strict=True)}
        return {key: values[name] for key, name in self._state_keys.items()}


def module(torch_module: torch.nn.Module, args: tuple = (),
           kwargs: Mapping[str, Any] | None = None, *, dynamic_shapes: DynamicShapes = None,
           replace: Sequence = (), strict: bool | None = None,
           compile: bool | Mapping[str, Any] = False) -> TorchModule:
    """`torch_module` as a MindSpore Cell running its forward in one kernel launch; see
    TorchModule. `args` and `kwargs` are an example call, as torch.export takes them: tensors
    anywhere in them (tuples, lists, dicts, any pytree node) are the Cell's inputs, the rest
    (use_cache=False, None, numbers) constants of the capture. dynamic_shapes: torch.export's
    argument, mirroring the inputs (by the forward's argument names: `{"input_ids": {0:
    Dim("batch"), 1: Dim("seq", max=512)}}`, or one spec per argument in order; a `*xs`
    forward's as one per element). strict: torch.export's argument (True: TorchDynamo traces;
    False: Python runs the forward); None, the default, tries non-strict, then strict.
    compile: True runs the forward (and in train mode the backward) as code AOTInductor
    compiled ahead of time, cached on disk; a dict gives options, {"training": bool,
    "cache_dir": path}. A graph it cannot compile runs interpreted, with a CompileWarning."""
    return TorchModule(torch_module, args, kwargs, dynamic_shapes=dynamic_shapes,
                       replace=replace, strict=strict, compile=compile)
