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

Every way of reaching a Function ends in the one function object `Function.apply` binds (an
alias bound at import, functools.partial, a method holding it): its code is what the capture
swaps, in the capturing thread only. A Function's forward that draws random numbers makes its
node `function.random` (nondeterministic_seeded), so the program replays its draws in a backward
that recomputes; one applied under autocast runs under it again.

What a node cannot keep is refused by name at capture: a Function that writes an input in
place, returns something other than tensors, or reads a tensor that is not among its
arguments (a module's weight it closes over would be torch's, not the Cell's Parameter).
torch's own Functions (the `torch.` namespace) are left to torch.export, but checkpointing's,
whose function runs as part of the forward.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointFunction

from ..base import CaptureError
from . import nodes

# The function object torch.autograd.Function.apply binds: every way of reaching a Function
# (`Cls.apply`, `f = Cls.apply` bound at import, functools.partial, a method holding it) calls
# this one object, so while a capture traces its code is swapped (`_Redirect`), and
# `_TORCH_APPLY` runs torch's code meanwhile.
_APPLY = torch.autograd.Function.apply.__func__  # type: ignore[attr-defined]
_APPLY_CODE = _APPLY.__code__
_TORCH_APPLY = types.FunctionType(_APPLY_CODE, _APPLY.__globals__, _APPLY.__name__,
                                  _APPLY.__defaults__, _APPLY.__closure__)


class _Redirect:
    def apply(cls, *args, **kwargs):  # noqa: N805  (the classmethod's function)
        # torch's apply has one free variable, super()'s __class__ cell: a code swapped in for
        # it must have the same ones. It runs with torch's globals, so it imports its target.
        __class__  # type: ignore[name-defined]  # noqa: B018
        from ms_aten.programs.capture.autograd_functions import dispatch
        return dispatch(cls, args, kwargs)  # type: ignore[arg-type]


_REDIRECT_CODE = _Redirect.apply.__code__
assert _REDIRECT_CODE.co_freevars == _APPLY_CODE.co_freevars


def _autocast_state() -> tuple[tuple[str, torch.dtype], ...]:
    """The autocast regions entered where a Function is applied, by device type."""
    return tuple((device, torch.get_autocast_dtype(device)) for device in ("cpu", "cuda")
                 if torch.is_autocast_enabled(device))


@dataclass(frozen=True)
class Applied:
    """One application of a Function in a captured forward: its class and the arguments that
    are not tensors, around the tensors the node takes."""

    cls: type[torch.autograd.Function]
    spec: pytree.TreeSpec  # of (args, kwargs)
    constants: tuple[Any, ...]  # the leaves, None where a tensor goes
    tensor_leaves: tuple[int, ...]  # where the node's tensors go among the leaves
    # The autocast the capture applied it under (MindSpore's amp runs the program under one):
    # entered again whenever the node runs, so that it computes in the dtypes it was traced in.
    autocast: tuple[tuple[str, torch.dtype], ...]

    @property
    def name(self) -> str:
        return f"torch.autograd.Function {self.cls.__module__}.{self.cls.__qualname__}"

    def apply(self, tensors: list[torch.Tensor]) -> Any:
        """The Function applied to these tensors and the constants, as torch applies it."""
        leaves = list(self.constants)
        for position, tensor in zip(self.tensor_leaves, tensors, strict=True):
            leaves[position] = tensor
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        with contextlib.ExitStack() as stack:
            for device, dtype in self.autocast:
                stack.enter_context(torch.autocast(device, dtype=dtype))
            return _TORCH_APPLY(self.cls, *args, **kwargs)

    def __call__(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        out = self.apply(tensors)
        return list(out) if isinstance(out, tuple) else [out]


@dataclass
class _Entry:
    applied: Applied
    # Output shapes and dtypes, for a forward that cannot run on fake tensors (numpy).
    outputs: list[tuple[torch.Size, torch.dtype]] | None = None
    random: bool = False  # its forward draws random numbers: the node is function.random

    def __call__(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        outputs = self.applied(tensors)
        if self.outputs is not None:  # sizes that depend on values would be silently wrong
            got = [(o.shape, o.dtype) for o in outputs]
            if got != self.outputs:
                raise RuntimeError(
                    f"ms_aten: {self.applied.name} returned {got}, but {self.outputs} when the "
                    f"capture ran its forward on zeros (it cannot run on fake tensors): its "
                    f"output shapes must not depend on the values")
        return outputs


_LOCK = threading.Lock()
# .capturing: this thread's capture turns Functions into nodes; .inline: compile='s joint
# trace applies them.
_STATE = threading.local()


@contextlib.contextmanager
def inline() -> Iterator[None]:
    """Tracing in this block applies each Function node's Function (AOTAutograd then traces
    its forward and backward); elsewhere tracing keeps the node opaque."""
    with nodes.setting(_STATE, "inline", True):
        yield


def _autograd_kernel(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    if nodes.tracing(tensors) and not getattr(_STATE, "inline", False):
        return nodes.below_autograd(_OPS[nodes.entry(key, _Entry).random], key, tensors)
    return nodes.entry(key, _Entry)(tensors)


def _backend_kernel(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    # Below autograd (inference): the Function's forward, nothing recorded; an output that
    # shares an input's memory is cloned, as the op's schema is functional.
    with torch.no_grad():
        outputs = nodes.entry(key, _Entry)(tensors)
    memory = {t.untyped_storage().data_ptr() for t in tensors}
    return [o.clone() if o.untyped_storage().data_ptr() in memory else o for o in outputs]


def _fake(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    entry = nodes.entry(key, _Entry)
    if entry.outputs is not None:
        device = tensors[0].device if tensors else torch.device("cpu")
        return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in entry.outputs]
    with torch.no_grad():
        return [o.clone() for o in entry.applied(tensors)]


# A Function whose forward draws random numbers is function.random (the backward sees the
# forward's draws).
_LIBRARY, _OPS = nodes.define("ms_aten_autograd", "function", "function.random",
                              _autograd_kernel, _backend_kernel, _fake)


class _Reads(TorchDispatchMode):
    """Which tensors the ops under it read that no earlier op under it made, nor the inputs;
    whether one of them draws random numbers."""

    def __init__(self, inputs: list[torch.Tensor]) -> None:
        super().__init__()
        self.known = {id(t) for t in inputs}
        self.foreign: list[torch.Tensor] = []
        self.random = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.random |= torch.Tag.nondeterministic_seeded in func.tags
        for t in pytree.tree_leaves((args, kwargs or {})):
            if isinstance(t, torch.Tensor) and id(t) not in self.known:
                self.foreign.append(t)
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.known.add(id(t))
        return out


@contextlib.contextmanager
def _inside() -> Iterator[None]:
    """A Function's own forward runs in this block: the Functions it applies are its own
    business (applied as torch applies them), not nodes of their own."""
    with nodes.setting(_STATE, "inside", True):
        yield


def _run_once(applied: Applied, tensors: list[torch.Tensor]
              ) -> tuple[Any, _Reads, list[torch.Tensor] | None]:
    """One run of the Function's forward outside the traced graph: on the capture's fake
    tensors, or, for a forward that cannot run on them (numpy), on zeros shaped as they are;
    the outputs, what it read, and the zeros it ran on (None: on the fake tensors)."""
    reads = _Reads(tensors)
    try:
        with disable_proxy_modes_tracing(), torch.no_grad(), _inside(), reads:
            return applied.apply(tensors), reads, None
    except CaptureError:
        raise
    except RuntimeError as error:  # numpy, .item() on a fake tensor
        if not any(isinstance(t, FakeTensor | FunctionalTensor) for t in tensors):
            raise
        if any(isinstance(n, torch.SymInt) for t in tensors for n in t.shape):
            raise CaptureError(
                f"ms_aten: {applied.name}'s forward cannot run on torch.export's fake tensors "
                f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}) "
                f"and the capture has dynamic shapes; capture with static shapes") from error
        with unset_fake_temporarily(), disable_proxy_modes_tracing():
            zeros = [torch.zeros(t.shape, dtype=t.dtype) for t in tensors]
            reads = _Reads(zeros)
            with torch.no_grad(), _inside(), reads:
                return applied.apply(zeros), reads, zeros


def _check(applied: Applied, tensors: list[torch.Tensor]) -> tuple[bool, _Entry]:
    """CaptureError, naming the Function, for what its node cannot keep (see the module's
    docstring), from one run of its forward kept out of the graph being traced; whether it
    returns a tuple, and its table entry."""
    name = applied.name
    for value in applied.constants:
        if isinstance(value, torch.nn.Module):
            raise CaptureError(
                f"ms_aten: {name} takes the module {type(value).__name__} as an argument: its "
                f"weights would be torch's, not the Cell's Parameters; pass the tensors it "
                f"needs as arguments")
    versions = [t._version for t in tensors]
    outputs, reads, zeros = _run_once(applied, tensors)
    on_zeros = zeros is not None
    if any(t._version != v for t, v in zip(tensors, versions, strict=True)) or any(
            z._version for z in zeros or ()):
        raise CaptureError(f"ms_aten: {name} writes an input in place (mark_dirty); a captured "
                           f"Function must return new tensors")
    results = outputs if isinstance(outputs, tuple) else (outputs,)
    if not results or not all(isinstance(r, torch.Tensor) for r in results):
        kinds = ", ".join(type(r).__name__ for r in results)
        raise CaptureError(f"ms_aten: {name} returns {kinds or 'nothing'}; a captured Function "
                           f"returns a tensor or a tuple of tensors")
    # On zeros, tensors made from numpy arrays are foreign too: a weight is what requires grad.
    foreign = [t for t in reads.foreign if not on_zeros or t.requires_grad]
    if foreign:
        raise CaptureError(
            f"ms_aten: {name} reads a tensor (shape {list(foreign[0].shape)}) that is not "
            f"among its arguments (a weight it closes over would be torch's, not the Cell's "
            f"Parameter); pass it to apply()")
    entry = _Entry(applied, [(r.shape, r.dtype) for r in results] if on_zeros else None,
                   reads.random)
    return isinstance(outputs, tuple), entry


def _node(cls: type[torch.autograd.Function], args: tuple, kwargs: dict[str, Any]) -> Any:
    """The application as one node of the graph being traced."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    positions = tuple(i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor))
    tensors = [leaves[i] for i in positions]
    applied = Applied(cls, spec, tuple(None if i in positions else leaf
                                        for i, leaf in enumerate(leaves)), positions,
                       _autocast_state())
    returns_tuple, entry = _check(applied, tensors)
    key = nodes.register(entry)
    outputs = _OPS[entry.random](key, tensors)
    return tuple(outputs) if returns_tuple else outputs[0]


def dispatch(cls: type[torch.autograd.Function], args: tuple, kwargs: dict[str, Any]) -> Any:
    """What `Function.apply` does while a capture traces (`_Redirect`): in the capturing
    thread, a Function becomes a node; torch's checkpointing runs its function (its gradient is
    that function's); elsewhere, and for torch's other Functions, torch's apply."""
    if not getattr(_STATE, "capturing", False) or getattr(_STATE, "inside", False):
        return _TORCH_APPLY(cls, *args, **kwargs)
    if cls is CheckpointFunction:  # (run_function, preserve_rng_state, *args)
        return args[0](*args[2:])
    if cls.__module__.split(".")[0] == "torch":
        return _TORCH_APPLY(cls, *args, **kwargs)
    return _node(cls, args, kwargs)


_INSTALLED = 0  # captures under way, in every thread: the code is swapped while one is


@contextlib.contextmanager
def as_nodes() -> Iterator[None]:
    """While a capture traces in this thread: each Function it applies (but torch's own)
    becomes a node; other threads' Functions are torch's."""
    global _INSTALLED
    with _LOCK:
        _INSTALLED += 1
        _APPLY.__code__ = _REDIRECT_CODE
    try:
        with nodes.setting(_STATE, "capturing", True):
            yield
    finally:
        with _LOCK:
            _INSTALLED -= 1
            if not _INSTALLED:
                _APPLY.__code__ = _APPLY_CODE


def defined_at(filename: str, line: int) -> str | None:
    """The Function (module.qualname) whose forward holds this line of this file, if one does:
    a strict capture's refusal names it. None for source that is not a file (exec'd)."""
    if filename.startswith("<"):
        return None
    pending = list(torch.autograd.Function.__subclasses__())
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        code = getattr(cls.__dict__.get("forward"), "__code__", None) or getattr(
            getattr(cls.__dict__.get("forward"), "__func__", None), "__code__", None)
        if code is not None and code.co_filename == filename and line in {
                n for _, _, n in code.co_lines()}:
            return f"{cls.__module__}.{cls.__qualname__}"
    return None


def is_function_node(target: Callable) -> bool:
    return target in _OPS.values()


class Unkeyable(ValueError):
    """A Function's code reads something a compile cache cannot key (compile/compiled.py then
    compiles nothing)."""


_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
# Libraries whose functions are keyed by their names (and torch's version, in the key already):
# their code is not the user's to edit.
_LIBRARIES = frozenset({"torch", "numpy", "math", "functools", "operator", "builtins"})


def _identity(value: Any, seen: dict[int, tuple[Any, str]]) -> str:
    """What a Function's code can reach, as text: code objects (their bytecode, constants,
    names, nested code), the globals and closure cells they read, recursively; Unkeyable for
    a value that is none of these (a tensor, an object). `seen` holds each value it met (so
    that no id is reused meanwhile) with its text, a cycle's mark until it is known."""
    if id(value) in seen:
        return seen[id(value)][1]
    seen[id(value)] = (value, f"<cycle {len(seen)}>")
    if isinstance(value, _PLAIN):
        text = repr(value)
    elif isinstance(value, tuple | list | frozenset):
        text = repr(type(value)) + repr([_identity(v, seen) for v in value])
    elif isinstance(value, types.ModuleType):
        text = f"module {value.__name__}"
    elif isinstance(value, types.CodeType):
        text = repr((value.co_code.hex(), value.co_names, value.co_varnames,
                     [_identity(c, seen) for c in value.co_consts]))
    elif isinstance(value, staticmethod | classmethod):
        text = _identity(value.__func__, seen)
    elif isinstance(value, functools.partial):
        text = repr(("partial", _identity(value.func, seen), _identity(value.args, seen),
                     _identity(sorted(value.keywords.items()), seen)))
    elif isinstance(value, types.MethodType):
        text = repr(("method", _identity(value.__func__, seen),
                     _identity(value.__self__, seen)))
    elif isinstance(value, types.BuiltinFunctionType) or (
            (getattr(value, "__module__", None) or "").split(".")[0] in _LIBRARIES
            and callable(value)):
        text = f"{value.__module__}.{getattr(value, '__qualname__', repr(value))}"
    elif isinstance(value, types.FunctionType):
        code = value.__code__
        reads = sorted(global_reads(code))
        text = repr((value.__module__, value.__qualname__, _identity(code, seen),
                     _identity(value.__defaults__, seen),
                     [(n, _identity(value.__globals__[n], seen)) for n in reads
                      if n in value.__globals__],
                     [_identity(c.cell_contents, seen) for c in value.__closure__ or ()]))
    elif isinstance(value, type):
        text = repr((value.__module__, value.__qualname__,
                     [_identity(b, seen) for b in value.__bases__ if b is not object],
                     [(n, _identity(v, seen)) for n, v in sorted(vars(value).items())
                      if isinstance(v, types.FunctionType | staticmethod | classmethod)]))
    else:
        raise Unkeyable(f"its code reads a {type(value).__name__}, which the cache cannot key")
    seen[id(value)] = (value, text)
    return text


def global_reads(code: types.CodeType) -> set[str]:
    """The global names a code object and the code nested in it read (a cache key follows
    them: here, and programs/stored/key.py)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_reads(const)
    return names


def identities(gm: torch.fx.GraphModule) -> list[str]:
    """What each Function node of a graph applies, in order: its class with everything its
    methods' code can reach (_identity), its constants and autocast. A node's key is only a
    number of this process, so a cache of compiled code (compile/compiled.py) keys on these;
    Unkeyable, naming the Function, for one that reads what cannot be keyed."""
    found = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and is_function_node(node.target):
            applied = nodes.entry(node.args[0], _Entry).applied
            try:
                code = _identity(applied.cls, {})
                constants = _identity(applied.constants, {})
            except Unkeyable as error:
                raise Unkeyable(f"{applied.name}: {error}") from None
            found.append(repr((code, constants, applied.tensor_leaves, str(applied.spec),
                               applied.autocast)))
    return found


def stored(key: int) -> tuple[Applied, bool] | None:
    """What the Function node `key` applies, and whether it draws random numbers, for a stored
    capture (programs/stored/); None for a node whose entry holds more than that (the output
    shapes of a forward run on zeros), which a store does not keep."""
    entry = nodes.entry(key, _Entry)
    return None if entry.outputs is not None else (entry.applied, entry.random)


def apply_as_node(applied: Applied, random: bool) -> int:
    """The key of a new Function node that applies `applied`: a stored capture's Function, in
    a process that did not capture it; the program made with it owns it (nodes.own_keys)."""
    return nodes.register(_Entry(applied, random=random))
