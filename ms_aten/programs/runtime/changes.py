"""A torch module changed after its capture, taken by the Cell before its next call from Python
(capture/guards.py records what the capture took).

Who owns the weights: the Cell's MindSpore Parameters are the weights it runs and trains (a
MindSpore optimizer updates them, the torch module's tensors stay as they were until
`model.load_state_dict(cell.torch_state_dict())`). A write to the torch module's weights after
the capture (`load_state_dict`, an in-place edit under no_grad, a Parameter or buffer object
replaced) is copied into the Cell's Parameter before the next call, replacing what it held: the
Cell then runs what the torch module holds, as torch eager would. A replaced submodule, or a
Python value of a module or of a config it holds that changed (`self.scale`, `Dropout.p`, a λ,
`config.xxx`), captures the forward again over the same Parameters (the training state stays).
What cannot be kept (a weight of another shape or dtype, one added or removed, tied weights
untied, `requires_grad` changed) is refused by name, with TorchModuleChanged.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from mindspore import Parameter, ops

from ...native import dtypes, library
from ...native.convert import to_ms, to_torch
from ..base import CaptureError


class TorchModuleChanged(CaptureError):
    """The torch module of a TorchModule changed after the capture in a way the Cell cannot
    follow; the message names what changed, with its old and new value."""


@dataclass(frozen=True)
class Weights:
    """A torch module's weights as a Cell holds them: parameters, then buffers, by their first
    names; the other names of one tensor (tied weights) -> its name; state_dict keys -> names."""

    names: tuple[str, ...]
    tensors: tuple[torch.Tensor, ...]
    trainable: frozenset[str]
    aliases: dict[str, str]
    state_keys: dict[str, str]

    @staticmethod
    def of(module: torch.nn.Module) -> Weights:
        named = [*module.named_parameters(), *module.named_buffers()]
        by_tensor = {id(t): name for name, t in named}
        aliases = {alias: by_tensor[id(t)] for alias, t in [
            *module.named_parameters(remove_duplicate=False),
            *module.named_buffers(remove_duplicate=False)] if by_tensor[id(t)] != alias}
        state_keys = {key: by_tensor[id(t)]
                      for key, t in module.state_dict(keep_vars=True).items()
                      if id(t) in by_tensor}
        return Weights(tuple(name for name, _ in named), tuple(t for _, t in named),
                       frozenset(name for name, p in module.named_parameters()
                                 if p.requires_grad), aliases, state_keys)


def follow(cell: Any, running: bool = False) -> None:
    """`cell` (a TorchModule: its _guards, weights, _follow_tree and _capture_again) takes
    the torch module's changes since the capture (or since the last call): weights written
    into its Parameters, the forward captured again; TorchModuleChanged for what it cannot
    take. `running`: called by a graph's launch (ChangeCheck)."""
    guards = cell._guards
    if guards.unchanged():
        return
    tree, values = guards.tree(), guards.values()
    written = guards.weights(moved=bool(tree))
    if not (tree or values or written):
        guards.record()  # a new object of an equal value: the quick check passes again
        return
    owner = f"ms_aten.module({cell._name})"
    if tree or written:
        weights = Weights.of(cell._torch_module)
        _check_same_weights(owner, cell, weights)
        if tree:
            cell._follow_tree(weights)
    parameters = dict(zip(cell._weight_names, cell.weights, strict=True))
    for path, tensor in written:
        name = cell._aliases.get(path, path)
        if name not in parameters or tensor is None:
            raise TorchModuleChanged(f"{owner}: the torch module's weight '{path}' was "
                                     f"removed after the capture; a Cell keeps its Parameters: "
                                     f"make another ms_aten.module for the new model")
        parameter = parameters[name]
        _check_tensor(owner, path, tensor, parameter, name in cell._trainable)
        if not _write(parameter, tensor, running):
            raise TorchModuleChanged(
                f"{owner}: the torch module's weight '{path}' was written after the graph "
                f"MindSpore compiled around the Cell was built, and the running graph's memory "
                f"for its Parameter could not be written; write the Cell's Parameter instead")
    if tree or values:
        cell._capture_again([*tree, *values], running)
    guards.record()


def _write(parameter: Parameter, tensor: torch.Tensor, running: bool) -> bool:
    """tensor's values into the Parameter's own memory, which the graphs MindSpore compiled
    read (on the CPU, asnumpy is a view of it): a running graph's next kernel sees them, as a
    graph compiled before does. Elsewhere, or where the memory is not there to write (checked
    by reading it back), set_data, which a running graph would not see: False then."""
    if library.current_target() == "CPU":
        memory = to_torch(parameter, copy=False)
        memory.copy_(tensor.detach())
        if torch.equal(to_torch(parameter, copy=False), memory):
            return True
    if running:
        return False
    parameter.set_data(to_ms(tensor))
    return True


def _check_same_weights(owner: str, cell: Any, weights: Weights) -> None:
    """The tree now has the Cell's weights by the same names, ties and trainability."""
    if weights.names != cell._weight_names:
        added = sorted(set(weights.names) - set(cell._weight_names))
        removed = sorted(set(cell._weight_names) - set(weights.names))
        raise TorchModuleChanged(
            f"{owner}: the torch module's weights changed after the capture (added: "
            f"{added[:10]}, removed: {removed[:10]}); a Cell keeps its Parameters, and a "
            f"MindSpore optimizer holds them: make another ms_aten.module for the new model")
    if weights.aliases != cell._aliases:
        changed = sorted(set(weights.aliases.items()) ^ set(cell._aliases.items()))
        raise TorchModuleChanged(
            f"{owner}: the torch module's tied weights changed after the capture "
            f"({', '.join(f'{a} -> {b}' for a, b in changed[:6])}); the Cell's Parameters "
            f"keep the capture's ties: make another ms_aten.module")
    if weights.trainable != cell._trainable:
        name = sorted(weights.trainable ^ cell._trainable)[0]
        raise TorchModuleChanged(
            f"{owner}: requires_grad of the torch module's weight '{name}' changed after the "
            f"capture; set requires_grad on the Cell's Parameter '{name}' instead (MindSpore's "
            f"optimizers and gradients read the Cell's)")


def _check_tensor(owner: str, path: str, tensor: torch.Tensor, parameter: Parameter,
                  trainable: bool) -> None:
    shape, dtype = list(tensor.shape), dtypes.to_ms(tensor.dtype)
    if shape != list(parameter.shape) or dtype != parameter.dtype:
        raise TorchModuleChanged(
            f"{owner}: the torch module's weight '{path}' is now "
            f"{str(tensor.dtype).removeprefix('torch.')}{shape}, where the Cell's Parameter "
            f"'{parameter.name}' is {parameter.dtype}{list(parameter.shape)}; a Cell keeps its "
            f"Parameters' shapes and dtypes: make another ms_aten.module")
    if isinstance(tensor, torch.nn.Parameter) and tensor.requires_grad != trainable:
        raise TorchModuleChanged(
            f"{owner}: requires_grad of the torch module's weight '{path}' changed after the "
            f"capture to {tensor.requires_grad}; set it on the Cell's Parameter "
            f"'{parameter.name}' instead")


class ChangeCheck(ops.Custom):
    """GRAPH mode's check, an op before the program's kernel in every graph MindSpore compiles
    around the Cell (ms.jit, a loss Cell, value_and_grad): no Python runs between two launches
    of such a graph but this op's, a CPU pyfunc. When MindSpore builds the graph, it takes the
    torch module's changes as a call from Python does; at each launch it captures the forward
    again for a changed Python value (the new programs replace the old ones in the primitive,
    so this launch runs them), writes the weights written in torch into the Parameters' memory
    (the graph's), and refuses to run a primitive a change replaced (its token: the family the
    graph was compiled with). PYNATIVE runs no op: the Cell's
    `__call__` took the changes, as it does before a GRAPH-mode call from Python, whose graph's
    op then only checks the token (`_followed`)."""

    def __init__(self, cell: Any):
        ref = weakref.ref(cell)

        def at_build(shape: list[int]) -> list[int]:
            this = ref()
            if this is not None:
                follow(this)
            return shape

        def at_launch(token: np.ndarray) -> np.ndarray:
            this = ref()
            if this is not None:
                retired = this._retired.get(int(token[0]))
                if retired is not None:
                    raise TorchModuleChanged(retired)
                if not this._followed:  # a call from Python took the changes just now
                    follow(this, running=True)
            return token

        super().__init__(at_launch, out_shape=at_build, out_dtype=lambda dtype: dtype,
                         func_type="pyfunc")

    def __call__(self, token: Any) -> None:
        # PYNATIVE (GRAPH mode compiles the op and never calls this): nothing to launch.
        return None


def after(check: ChangeCheck | None, token: Any, inputs: Any) -> Any:
    """The program's inputs, the first made to wait for `check` (graph syntax: a construct's
    helper); as they are in PYNATIVE, for a program without inputs, or without a check."""
    if check is None:
        return inputs
    done = check(token)
    if done is None or len(inputs) == 0:
        return inputs
    return (ops.depend(inputs[0], ops.stop_gradient(done)),) + tuple(inputs[1:])
