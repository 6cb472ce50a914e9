"""What the capture's opaque nodes share: `ms_aten_autograd::function` (a custom
torch.autograd.Function, autograd_functions.py) and `ms_aten_opaque::call` (what torch.export
refuses, opaque.py) each take `(int key, Tensor[] tensors)`, the key naming an entry here that
holds the Python the node runs.

An entry lives while the programs that call it do: a capture registers it (`register`), the
program built from the graph owns it (`own`, from lowering/program.py's build) and frees it
when the program is freed (with its Cell); a capture that fails frees the entries it
registered (`registering`), and the next `own` in its thread frees those of captures that no
program took. The table is process-wide, like torch's op registry, which calls the nodes'
kernels.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.utils._python_dispatch import _get_current_dispatch_mode


@dataclass
class _Slot:
    entry: Any  # autograd_functions' _Entry or opaque's Region
    owners: int = 0  # the programs that call it (own()); 0: its capture's thread holds it


_ENTRIES: dict[int, _Slot] = {}
_KEYS = itertools.count()
_LOCK = threading.Lock()
_STATE = threading.local()  # .pending: keys of this thread's captures that no program owns yet
_TARGETS: set[Any] = set()  # the ops whose first argument is a key of this table
_Kind = TypeVar("_Kind")


Kernel = Callable[[int, list[torch.Tensor]], list[torch.Tensor]]


def define(namespace: str, plain: str, random: str, autograd: Kernel, backend: Kernel,
           fake: Kernel) -> tuple[torch.library.Library, dict[bool, torch._ops.OpOverload]]:
    """One kind of node: the ops `plain` and `random` (an overload name may follow a dot),
    `(int key, Tensor[] tensors) -> Tensor[]`, with these kernels; `random` is tagged as
    torch tags random ops, so that its program records the generator state a recomputing
    backward replays. The library (kept by the caller) and the two ops, by whether random."""
    library = torch.library.Library(namespace, "DEF")
    ops = {}
    for name, is_random in ((plain, False), (random, True)):
        library.define(f"{name}(int key, Tensor[] tensors) -> Tensor[]",
                       tags=(torch.Tag.nondeterministic_seeded,) if is_random else ())
        library.impl(name, autograd, "Autograd")
        library.impl(name, backend, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{namespace}::{name}", fake, lib=library)
        op, _, overload = name.partition(".")
        ops[is_random] = getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")
    _TARGETS.update(ops.values())
    return library, ops


def entry(key: int, kind: type[_Kind]) -> _Kind:
    """What the node with this key runs, of the kind its namespace's kernels expect."""
    found = _ENTRIES[key].entry
    assert isinstance(found, kind), (key, found)
    return found


def alive() -> set[int]:
    """The keys of the entries alive (tests check that a freed Cell's are freed)."""
    return set(_ENTRIES)


def register(value: Any) -> int:
    """A new entry for a node the capture in this thread is tracing: its key."""
    key = next(_KEYS)
    with _LOCK:
        _ENTRIES[key] = _Slot(value)
    _pending().append(key)  # freed at this thread's next build if no program owns it
    return key


def _pending() -> list[int]:
    if getattr(_STATE, "pending", None) is None:
        _STATE.pending = []
    return _STATE.pending


@contextlib.contextmanager
def registering() -> Iterator[None]:
    """A capture in this block that fails frees the entries it registered."""
    pending = _pending()
    start = len(pending)
    try:
        yield
    except BaseException:
        _release(pending[start:])
        del pending[start:]
        raise


def _release(keys: list[int]) -> None:
    with _LOCK:
        for key in keys:
            slot = _ENTRIES.get(key)
            if slot is not None:
                slot.owners -= 1
                if slot.owners <= 0:
                    del _ENTRIES[key]


_KEPT = "ms_aten kept keys"  # a graph's meta entry: keys its compiled code calls


def keys(gm: torch.fx.GraphModule) -> list[int]:
    """The keys of a graph's nodes of this table (its submodules' included), and those its
    compiled code calls (keep_keys)."""
    return [*gm.meta.get(_KEPT, ()), *(
        node.args[0] for module in gm.modules() if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
        if node.op == "call_function" and node.target in _TARGETS)]


def keep_keys(gm: torch.fx.GraphModule, kept: list[int]) -> None:
    """The graph is about to be compiled into code that calls these of its nodes by key: own()
    keeps their entries as if the nodes were still in the graph."""
    gm.meta[_KEPT] = list(kept)


def own(owner: object, gm: torch.fx.GraphModule) -> None:
    """`owner` (a program built from `gm`) calls gm's nodes: their entries live until it is
    freed. The entries this thread's captures made that no program took are freed: the graph a
    capture traces is built before the next one starts."""
    own_keys(owner, keys(gm))


def own_keys(owner: object, found: list[int]) -> None:
    """`owner` (a program) calls the nodes `found` (a stored capture's, keyed anew): own()."""
    with _LOCK:
        for key in found:
            _ENTRIES[key].owners += 1
    weakref.finalize(owner, _release, found).atexit = False
    pending = _pending()
    taken = set(found)
    _release([key for key in pending if key not in taken and key in _ENTRIES
              and _ENTRIES[key].owners == 0])
    pending.clear()


@contextlib.contextmanager
def setting(state: threading.local, name: str, value: Any) -> Iterator[None]:
    """`state.name` is `value` in this block, for this thread; as it was (or unset) after."""
    before = state.__dict__.get(name, _UNSET)
    setattr(state, name, value)
    try:
        yield
    finally:
        if before is _UNSET:
            delattr(state, name)
        else:
            setattr(state, name, before)


_UNSET = object()


def tracing(tensors: list[torch.Tensor]) -> bool:
    """Whether a node's kernel is being traced (a dispatch mode, fake or functional tensors)
    rather than run."""
    return _get_current_dispatch_mode() is not None or any(
        isinstance(t, FakeTensor | FunctionalTensor) for t in tensors)


def below_autograd(op: torch._ops.OpOverload, key: int,
                   tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The node again, below autograd: what a trace records is the opaque node itself."""
    with torch._C._AutoDispatchBelowAutograd():
        return op(key, tensors)
