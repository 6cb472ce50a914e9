"""ms_aten.module: a torch.nn.Module as a MindSpore Cell whose weights are MindSpore Parameters."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from mindspore import Parameter, ParameterTuple

from ..native.convert import to_ms, to_torch
from .capture import DynamicShapes, dim_names, example_like, export, input_names, per_input
from .cell import ProgramCell
from .primitive import AtenFunction
from .program import Program, Signature, build


class TorchModule(ProgramCell):
    """A torch module's forward as one ms_aten program (one kernel launch), with every torch
    parameter a MindSpore Parameter of the same name (`trainable_params()` go straight to a
    MindSpore optimizer) and every buffer a non-trainable Parameter.

    The Cell starts in the torch module's mode (`module.training`); `set_train(mode)` captures
    the other mode's graph once. Buffers the graph updates (a KV cache, BatchNorm's running
    statistics in train mode) are written in place, into their Parameters (inplace.py).
    Returns the module's outputs flattened as torch.utils._pytree does (a HuggingFace
    ModelOutput gives its tensors in field order): a Tensor when there is one, else a tuple.

    In either mode a forward that a backward follows keeps its autograd graph for it, which then
    runs one backward pass and no second forward; inference keeps nothing (csrc/program/saved.h):
    an eval-mode module differentiated (a fine-tuning without dropout, a saliency map) is not
    inference.

    Captured with `dynamic_shapes` (torch.export's argument), one program serves every size its
    ranges allow, and the Cell declares the dynamic sizes to MindSpore (`set_inputs` with None
    there), so GRAPH mode compiles it once too. `replace`: (pattern, replacement[,
    example_inputs]) tuples applied at every capture (rewrite.py); `cell.program.replaced`
    counts the matches. `strict`: torch.export's argument; None tries non-strict, then strict.
    """

    def __init__(self, module: torch.nn.Module, example_inputs: tuple,
                 dynamic_shapes: DynamicShapes = None, replace: Sequence = (), *,
                 strict: bool | None = None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ms_aten.module expects a torch.nn.Module, "
                            f"got {type(module).__name__}")
        if not isinstance(example_inputs, tuple) or not all(
                isinstance(x, torch.Tensor) for x in example_inputs):
            raise TypeError("ms_aten.module: example_inputs must be a tuple of torch tensors")
        self._torch_module = module
        self._example = example_inputs
        self._replace = replace
        self._strict = strict
        self._name = type(module).__name__
        self._input_names = input_names(module.forward, len(example_inputs))
        try:
            self._dynamic_shapes = per_input(dynamic_shapes, self._input_names)
        except TypeError as error:
            raise TypeError(f"ms_aten.module({self._name}): {error}") from None
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
        self._functions: dict[bool, AtenFunction] = {}
        super().set_train(module.training)
        self._select(module.training)

    def _capture(self, training: bool, example: tuple) -> Program:
        module = self._torch_module
        # Each submodule's own mode comes back afterwards: module.train() would set them all to
        # the top's (a new wrapper around an eval-mode model is in train mode).
        modes = {m: m.training for m in module.modules()}
        module.train(training)
        specs = self._dynamic_shapes
        try:
            # The strictness that captured the first time captures every later time.
            exported, self._strict = export(module, example, self._name,
                                            None if specs is None else tuple(specs),
                                            self._replace, self._strict)
        finally:
            for m, mode in modes.items():
                m.training = mode
        return build(exported, self._name, self._weight_names, self._trainable, self._aliases,
                     dim_names=dim_names(specs), input_names=self._input_names)

    def _select(self, training: bool) -> None:
        function = self._functions.get(training)
        if function is None:
            def recapture(signature: Signature) -> Program:
                return self._capture(training, example_like(signature))

            function = AtenFunction(self._capture(training, self._example), recapture)
            self._functions[training] = function
        self._use(function)

    def set_train(self, mode: bool = True) -> TorchModule:
        super().set_train(mode)
        self._select(mode)
        return self

    def construct(self, *inputs):
        return self._outputs(self._function(*self.weights, *inputs))

    def torch_state_dict(self) -> dict[str, torch.Tensor]:
        """The current weights as the torch module's state dict (same keys), so a model trained
        in MindSpore goes back with `module.load_state_dict(cell.torch_state_dict())`."""
        values = {name: to_torch(p.value())
                  for name, p in zip(self._weight_names, self.weights, strict=True)}
        return {key: values[name] for key, name in self._state_keys.items()}


def module(torch_module: torch.nn.Module, example_inputs: tuple,
           dynamic_shapes: DynamicShapes = None, replace: Sequence = (), *,
           strict: bool | None = None) -> TorchModule:
    """`torch_module` as a MindSpore Cell running its forward in one kernel launch; see
    TorchModule. dynamic_shapes: torch.export's argument (one spec per input, or a dict by the
    forward's argument names: `{"input_ids": {0: Dim("batch"), 1: Dim("seq", max=512)}}`).
    strict: torch.export's argument (True: TorchDynamo traces; False: Python runs the forward);
    None, the default, tries non-strict, then strict."""
    return TorchModule(torch_module, example_inputs, dynamic_shapes, replace, strict=strict)
