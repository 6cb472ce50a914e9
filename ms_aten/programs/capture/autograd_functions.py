"""Custom `torch.autograd.Function`s inside a captured forward, kept with their own backward.

torch.export loses a Function's backward (non-strict tracing inlines its forward, whose own
derivative is then used: a gradient reversal's `-g` becomes `g`). While ms_aten captures, a
Function applied by the module's code becomes one opaque node, `ms_aten_autograd::function(key,
tensors)`, which the program calls through the dispatcher like any op: at run time its Autograd
kernel applies the Function itself, so torch autograd records the Function's own backward in
the kept graph (ctx.save_for_backward, needs_input_grad, mark_non_differentiable and several
outputs as torch has them), and the first- and second-order VJPs differentiate through it.
Tracing (run_decompositions) sees the node as opaque, its shapes from the Function's forward
on fake tensors; compile='s joint trace applies the Function (`inline`), so AOTAutograd traces
its forward and its backward into the compiled code.

What a node cannot keep is refused by name at capture: a Function that writes an input in
place, returns something other than tensors, or reads a tensor that is not among its
arguments (a module's weight it closes over would be torch's, not the Cell's Parameter).
torch's own Functions (the `torch.` namespace: checkpointing, ...) are left to torch.export.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from ..base import CaptureError

NAMESPACE = "ms_aten_autograd"
_LIBRARY = torch.library.Library(NAMESPACE, "DEF")
_LIBRARY.define("function(int key, Tensor[] tensors) -> Tensor[]")
_ORIGINAL_APPLY = torch.autograd.Function.apply.__func__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class _Applied:
    """One application of a Function in a captured forward: its class and the arguments that
    are not tensors, around the tensors the node takes."""

    cls: type[torch.autograd.Function]
    spec: pytree.TreeSpec  # of (args, kwargs)
    constants: tuple[Any, ...]  # the leaves, None where a tensor goes
    tensor_leaves: tuple[int, ...]  # where the node's tensors go among the leaves

    def apply(self, tensors: list[torch.Tensor]) -> Any:
        """The Function applied to these tensors and the constants, as torch applies it."""
        leaves = list(self.constants)
        for position, tensor in zip(self.tensor_leaves, tensors, strict=True):
            leaves[position] = tensor
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return _ORIGINAL_APPLY(self.cls, *args, **kwargs)

    def __call__(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        out = self.apply(tensors)
        return list(out) if isinstance(out, tuple) else [out]


# Every Function a capture met, by the key its node carries; process-wide like torch's own op
# registry (a node of a program outlives the capture that made it).
_APPLIED: dict[int, _Applied] = {}
_KEYS = itertools.count()
_STATE = threading.local()  # .inline: compile='s joint trace applies Functions


@contextlib.contextmanager
def inline() -> Iterator[None]:
    """Tracing in this block applies each Function node's Function (AOTAutograd then traces
    its forward and backward); elsewhere tracing keeps the node opaque."""
    before = getattr(_STATE, "inline", False)
    _STATE.inline = True
    try:
        yield
    finally:
        _STATE.inline = before


def _tracing(tensors: list[torch.Tensor]) -> bool:
    return _get_current_dispatch_mode() is not None or any(
        isinstance(t, FakeTensor | FunctionalTensor) for t in tensors)


def _autograd_kernel(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    if _tracing(tensors) and not getattr(_STATE, "inline", False):
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.ms_aten_autograd.function(key, tensors)
    return _APPLIED[key](tensors)


def _backend_kernel(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    # Below autograd (inference): the Function's forward, nothing recorded; an output that
    # shares an input's memory is cloned, as the op's schema is functional.
    with torch.no_grad():
        outputs = _APPLIED[key](tensors)
    memory = {t.untyped_storage().data_ptr() for t in tensors}
    return [o.clone() if o.untyped_storage().data_ptr() in memory else o for o in outputs]


_LIBRARY.impl("function", _autograd_kernel, "Autograd")
_LIBRARY.impl("function", _backend_kernel, "CompositeExplicitAutograd")


@torch.library.register_fake(f"{NAMESPACE}::function", lib=_LIBRARY)
def _fake(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [o.clone() for o in _APPLIED[key](tensors)]


class _Reads(TorchDispatchMode):
    """Which tensors the ops under it read that no earlier op under it made, nor the inputs."""

    def __init__(self, inputs: list[torch.Tensor]) -> None:
        super().__init__()
        self.known = {id(t) for t in inputs}
        self.foreign: list[torch.Tensor] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for t in pytree.tree_leaves((args, kwargs or {})):
            if isinstance(t, torch.Tensor) and id(t) not in self.known:
                self.foreign.append(t)
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.known.add(id(t))
        return out


def _check(applied: _Applied, tensors: list[torch.Tensor]) -> bool:
    """CaptureError, naming the Function, for what its node cannot keep (see the module's
    docstring), from one run of its forward on the capture's fake tensors, kept out of the
    graph being traced; whether it returns a tuple."""
    name = f"torch.autograd.Function {applied.cls.__module__}.{applied.cls.__qualname__}"
    for value in applied.constants:
        if isinstance(value, torch.nn.Module):
            raise CaptureError(
                f"ms_aten: {name} takes the module {type(value).__name__} as an argument: its "
                f"weights would be torch's, not the Cell's Parameters; pass the tensors it "
                f"needs as arguments")
    versions = [t._version for t in tensors]
    reads = _Reads(tensors)
    with disable_proxy_modes_tracing(), torch.no_grad(), reads:
        outputs = applied.apply(tensors)
    if any(t._version != v for t, v in zip(tensors, versions, strict=True)):
        raise CaptureError(f"ms_aten: {name} writes an input in place (mark_dirty); a captured "
                           f"Function must return new tensors")
    results = outputs if isinstance(outputs, tuple) else (outputs,)
    if not results or not all(isinstance(r, torch.Tensor) for r in results):
        kinds = ", ".join(type(r).__name__ for r in results)
        raise CaptureError(f"ms_aten: {name} returns {kinds or 'nothing'}; a captured Function "
                           f"returns a tensor or a tuple of tensors")
    if reads.foreign:
        raise CaptureError(
            f"ms_aten: {name} reads a tensor (shape {list(reads.foreign[0].shape)}) that is not "
            f"among its arguments (a weight it closes over would be torch's, not the Cell's "
            f"Parameter); pass it to apply()")
    return isinstance(outputs, tuple)


def _apply(cls: type[torch.autograd.Function], *args: Any, **kwargs: Any) -> Any:
    if cls.__module__.split(".")[0] == "torch":
        return _ORIGINAL_APPLY(cls, *args, **kwargs)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    positions = tuple(i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor))
    tensors = [leaves[i] for i in positions]
    applied = _Applied(cls, spec, tuple(None if i in positions else leaf
                                        for i, leaf in enumerate(leaves)), positions)
    returns_tuple = _check(applied, tensors)
    key = next(_KEYS)
    _APPLIED[key] = applied
    outputs = torch.ops.ms_aten_autograd.function(key, tensors)
    return tuple(outputs) if returns_tuple else outputs[0]


@contextlib.contextmanager
def as_nodes() -> Iterator[None]:
    """While a capture traces: each Function applied (but torch's own) becomes a node."""
    torch.autograd.Function.apply = classmethod(_apply)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.autograd.Function.apply = classmethod(  # type: ignore[method-assign,assignment]
            _ORIGINAL_APPLY)


def is_function_node(target: Callable) -> bool:
    return target is torch.ops.ms_aten_autograd.function.default


def identities(gm: torch.fx.GraphModule) -> list[str]:
    """What each Function node of a graph applies, in order: its class, its methods' code and
    its constants. A node's key is only a number of this process, so a cache of compiled code
    (compile/compiled.py) keys on these."""
    found = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and is_function_node(node.target):
            applied = _APPLIED[node.args[0]]
            methods = [getattr(applied.cls, m, None) for m in ("forward", "setup_context",
                                                                 "backward", "vjp", "jvp")]
            code = [f.co_code.hex() + repr(f.co_consts) for f in
                    (getattr(m, "__code__", None) for m in methods) if f is not None]
            found.append(repr((applied.cls.__module__, applied.cls.__qualname__, code,
                               applied.constants, applied.tensor_leaves, str(applied.spec))))
    return found
