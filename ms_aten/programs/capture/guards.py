"""What a capture took from the torch module besides its graph, recorded so that a later change
is seen (module.py applies it) instead of silently ignored: the submodule tree (which object
sits at each name), each weight (which tensor object, its version counter, storage, shape,
dtype) and every Python value the modules and the plain objects they hold (a HuggingFace
config) keep in their `__dict__` (numbers, bools, strings, None, containers of them: a
`Dropout.p`, a λ, a config flag; other objects by identity, hooks by their keys).

All values are recorded, not only those the forward read: torch.export gives no list of the
Python values it read, and intercepting attribute reads would change the modules' classes under
TorchDynamo (strict captures). A change to a value the forward never read therefore costs one
capture again, whose program is then the same and is not installed (module.py).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch

# nn.Module's own tables, checked as the tree and the weights; `training` is the modes'.
_MODULE_TABLES = frozenset({"_parameters", "_buffers", "_modules", "training"})
_PLAIN = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device,
          torch.Size)
_MISSING = object()


def _is_plain(value: Any, depth: int = 0) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if depth > 3:
        return False
    if isinstance(value, (tuple, list, frozenset, set)):
        return all(_is_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_is_plain(k, depth + 1) and _is_plain(v, depth + 1) for k, v in value.items())
    return False


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # a value whose == is not a bool: changed, to be safe
        return False


@dataclass(frozen=True)
class Change:
    """One thing that changed since the capture: `kind` is weight, attribute or module."""

    kind: str
    path: str
    old: Any
    new: Any

    def describe(self) -> str:
        return f"{self.kind} '{self.path}' was {_show(self.old)}, now {_show(self.new)}"


def _show(value: Any) -> str:
    if value is _MISSING:
        return "absent"
    if isinstance(value, torch.Tensor):
        return f"a tensor {str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    if isinstance(value, _Identity):
        return value.text
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class _Identity:
    """A non-plain value, compared by identity (a function, an object)."""

    obj: Any
    text: str

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Identity):
            return False
        if isinstance(self.obj, tuple) and isinstance(other.obj, tuple):  # (tensor, version)
            return self.obj[0] is other.obj[0] and self.obj[1] == other.obj[1]
        return other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _recorded(value: Any) -> Any:
    """The form in which a `__dict__` value is kept and compared."""
    if _is_plain(value):
        return copy.deepcopy(value)  # a list edited in place must show as changed
    if isinstance(value, torch.Tensor):  # a tensor attribute (a constant of the capture)
        dtype = str(value.dtype).removeprefix("torch.")
        return _Identity((value, value._version),
                         f"a tensor {dtype}{list(value.shape)}, version {value._version}")
    if isinstance(value, dict) and all(isinstance(k, (str, int)) for k in value):
        # hooks and other tables of objects: their keys and the objects at them
        return tuple((k, id(v)) for k, v in value.items())
    return _Identity(value, f"{type(value).__qualname__} object at {id(value):#x}")


@dataclass
class _Weight:
    path: str
    table: dict[str, Any]  # the owner's _parameters or _buffers
    name: str
    tensor: torch.Tensor
    version: int
    pointer: int


class Guards:
    """The state of a torch module a capture depends on; `changes()` lists what differs now.

    Cheap enough to run before every call: identities, integers and the recorded values are
    compared, nothing is copied. `weights()` / `tree()` / `values()` split the changes by what
    they need: a weight's new values are copied, a new tree or value needs a capture again."""

    def __init__(self, module: torch.nn.Module):
        self._module = module
        self.record()

    def record(self) -> None:
        """Takes the module's state as it is now as the captured one."""
        module = self._module
        self._tree = [(parent._modules, dict(parent._modules), prefix)
                      for prefix, parent in module.named_modules(remove_duplicate=False)]
        self._weights = [self._weight(prefix, owner, table, name)
                         for prefix, owner in module.named_modules(remove_duplicate=False)
                         for table in (owner._parameters, owner._buffers)
                         for name in table if table[name] is not None]
        self._values: list[_Held] = []
        seen: set[int] = set()
        for prefix, owner in module.named_modules():
            self._hold(owner, prefix, seen)

    def _weight(self, prefix: str, owner: torch.nn.Module, table: dict[str, Any],
                name: str) -> _Weight:
        tensor = table[name]
        return _Weight(f"{prefix}{'.' if prefix else ''}{name}", table, name, tensor,
                       tensor._version, tensor.data_ptr())

    def _hold(self, obj: Any, path: str, seen: set[int]) -> None:
        """Records obj's `__dict__` values, and those of the plain objects a module holds (a
        config, one level down)."""
        if id(obj) in seen:
            return
        seen.add(id(obj))
        state = getattr(obj, "__dict__", None)
        if not isinstance(state, dict):
            return
        self._values.append(_Held.of(state, path))
        if isinstance(obj, torch.nn.Module):
            for key, value in state.items():
                if key not in _MODULE_TABLES and _holds_values(value):
                    self._hold(value, f"{path}{'.' if path else ''}{key}", seen)

    def weights(self, moved: bool = False) -> list[tuple[str, torch.Tensor | None]]:
        """The weights whose tensor object, version or storage changed: (path, tensor now, or
        None where it is gone). `moved`: submodules were replaced, so that the weights are
        looked up by path in the tree as it is now, not in the tables of the capture's."""
        if not moved:
            return [(weight.path, now) for weight in self._weights
                    if (now := weight.table.get(weight.name)) is not weight.tensor
                    or now._version != weight.version or now.data_ptr() != weight.pointer]
        kept = {weight.path: weight for weight in self._weights}
        changed: list[tuple[str, torch.Tensor | None]] = []
        for prefix, owner in self._module.named_modules(remove_duplicate=False):
            for table in (owner._parameters, owner._buffers):
                for name, now in table.items():
                    path = f"{prefix}{'.' if prefix else ''}{name}"
                    weight = kept.pop(path, None)
                    if now is not None and (weight is None or now is not weight.tensor
                                            or now._version != weight.version
                                            or now.data_ptr() != weight.pointer):
                        changed.append((path, now))
        return changed + [(path, None) for path in kept]

    def tree(self) -> list[Change]:
        """Submodules replaced, added or removed."""
        changes = []
        for table, kept, prefix in self._tree:
            if len(table) == len(kept) and all(table.get(k) is v for k, v in kept.items()):
                continue
            for name in {*kept, *table}:
                old, new = kept.get(name, _MISSING), table.get(name, _MISSING)
                if old is not new:
                    changes.append(Change("module", f"{prefix}{'.' if prefix else ''}{name}",
                                          _kind(old), _kind(new)))
        return changes

    def values(self) -> list[Change]:
        """Python values changed, added or removed in a module's or config's `__dict__`."""
        changes = []
        for i, held in enumerate(self._values):
            if held.unchanged():
                continue
            found = held.changes()
            if not found:  # an equal value in a new object: compare by identity again
                self._values[i] = _Held.of(held.state, held.path)
            changes += found
        return changes


@dataclass
class _Held:
    """One `__dict__`'s recorded values. unchanged() is the per-call check: the values by
    identity (one tuple comparison), hook tables by length, mutable containers and tensors by
    value; changes() says what differs when it fails."""

    state: dict[str, Any]
    path: str
    size: int
    keys: tuple[str, ...]
    objects: tuple[Any, ...]
    kept: dict[str, Any]  # the recorded forms (_recorded)
    deep: tuple[str, ...]  # mutable plain containers and tensors, compared each time
    tables: tuple[dict, ...]  # tables of objects (hooks): their lengths, and non-empty ones' keys
    lengths: tuple[int, ...]
    keyed: tuple[tuple[dict, tuple], ...]

    @staticmethod
    def of(state: dict[str, Any], path: str) -> _Held:
        keys = tuple(k for k, v in state.items()
                     if k not in _MODULE_TABLES and not isinstance(v, torch.nn.Module))
        kept = {k: _recorded(state[k]) for k in keys}
        # Hook tables and empty containers: by length (and a non-empty table's keys).
        tables = tuple(state[k] for k in keys if isinstance(state[k], (dict, list, set)) and (
            not state[k] or not _is_plain(state[k])))
        return _Held(state, path, len(state), keys, tuple(state[k] for k in keys), kept,
                     tuple(k for k in keys if isinstance(state[k], (list, dict, set, torch.Tensor))
                           and not any(state[k] is t for t in tables)),
                     tables, tuple(map(len, tables)),
                     tuple((t, tuple(t)) for t in tables if t and isinstance(t, dict)))

    def unchanged(self) -> bool:
        state = self.state
        try:
            if len(state) != self.size or tuple(map(state.get, self.keys)) != self.objects:
                return False
        except Exception:  # a value whose == is not a bool (a tensor): compare one by one
            return False
        return (tuple(map(len, self.tables)) == self.lengths
                and all(tuple(t) == k for t, k in self.keyed)
                and all(_same(self.kept[k], _recorded_now(state.get(k, _MISSING)))
                        for k in self.deep))

    def changes(self) -> list[Change]:
        state, kept = self.state, self.kept
        changes = []
        for key in sorted({*kept, *state} - _MODULE_TABLES):
            old, new = kept.get(key, _MISSING), state.get(key, _MISSING)
            if isinstance(new, torch.nn.Module) and old is _MISSING:
                continue
            if not _same(old, _recorded_now(new)):
                changes.append(Change("attribute", f"{self.path}{'.' if self.path else ''}{key}",
                                      old, new))
        return changes


def _kind(module: Any) -> Any:
    return module if module is _MISSING or module is None else \
        _Identity(module, f"a {type(module).__name__}")


def _recorded_now(value: Any) -> Any:
    """A current value in the form _recorded keeps, without copying a plain one."""
    if value is _MISSING or _is_plain(value):
        return value
    return _recorded(value)


def _holds_values(value: Any) -> bool:
    """An object whose own attributes a forward may read (a config, a namespace): not a
    tensor, a module, a function or a class."""
    return (hasattr(value, "__dict__") and not isinstance(
        value, (torch.Tensor, torch.nn.Module, type, dict, list, tuple, set, frozenset))
        and not callable(value))
