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
import operator
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import Any

import torch

# nn.Module's own tables, checked as the tree and the weights; `training` is the modes'.
_MODULE_TABLES = frozenset({"_parameters", "_buffers", "_modules", "training"})
_PLAIN = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device,
          torch.Size)
_MISSING = object()


_PLAIN_TYPES = frozenset(_PLAIN)
_CONTAINERS = frozenset({tuple, list, frozenset, set, dict})


def _is_plain(value: Any, depth: int = 0) -> bool:
    kind = type(value)
    if kind in _PLAIN_TYPES or (kind not in _CONTAINERS and isinstance(value, _PLAIN)):
        return True
    if depth > 3:
        return False
    # A container of plain values of the exact types first: one C-level pass (it runs at
    # every call for a config's sets and dicts, _Snapshot.deep); then subclasses, nesting.
    if isinstance(value, (tuple, list, frozenset, set)):
        return _PLAIN_TYPES.issuperset(map(type, value)) or all(
            _is_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return (_PLAIN_TYPES.issuperset(map(type, value))
                and _PLAIN_TYPES.issuperset(map(type, value.values()))) or all(
            _is_plain(k, depth + 1) and _is_plain(v, depth + 1) for k, v in value.items())
    return False


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types, inside containers too: `1` and `1.0`, or `(1,)` and
    `(1.0,)`, are equal to `==` but give torch ops other dtypes."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(map(_same, a, b)) and all(
            map(_same, a.values(), b.values()))
    if isinstance(a, (set, frozenset)):
        return {(type(v), v) for v in a} == {(type(v), v) for v in b}
    try:
        return bool(a == b)
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
    """The state of a torch module a capture depends on. `unchanged()` is the per-call check
    (_Snapshot); when it fails, `weights()` / `tree()` / `values()` say what differs, split by
    what it needs: a weight's new values are copied, a new tree or value needs a capture
    again."""

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
        self._snapshot = _Snapshot.of(self._tree, self._weights, self._values)

    def unchanged(self) -> bool:
        """Nothing that tree(), weights() or values() compare can differ from the record (a
        False may be a change those find equal: a new object of an equal value)."""
        return self._snapshot.unchanged()

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


_VERSION = operator.attrgetter("_version")


@dataclass
class _Snapshot:
    """The per-call check, in a few C-level passes over flat lists instead of Python code per
    module and value (~25 ns a value compared by identity in Python, ~5 in a list's `==`).
    Recorded: every table the detailed checks read (each module's and config's `__dict__`, each
    module's submodule, parameter, buffer and hook tables) and the objects in them.
    - Tables recorded empty (most hook tables) are still empty.
    - The others have the same length and keys, in order, and at each key an object equal to
      the recorded one (a list's `==`: the same object, or one that compares equal, such as a
      table or config replaced by an equal one; the recorded objects are kept, so each call
      compares a replacement against them, and a later change to it is seen). The weights, in
      their tables, and tensor attributes are compared by identity (a one-element tensor's `==`
      is its value), and have the same version counter and storage.
    - The objects have the same types (`1.0` for `1` is equal to `==` but makes another
      dtype), and all but plain scalars and the tables recorded empty are the same objects
      (`(1.0,)` for `(1,)`, a config whose `==` compares its fields so): a new one costs a
      detailed check, which compares items' types (_same) and takes another config as a
      change. A table recorded empty needs no identity: a replacement equal to it is empty
      too, and anything put in it later makes it differ from the recorded one.
    - Mutable plain containers (`_Held.deep`) have the same value, as values() compares them:
      a flat one of plain values in one C-level comparison of its _flat form, others by _same.
    Stricter than the detailed checks (`training` included): a False costs one detailed check
    and a record."""

    empty: list[Any]  # the tables recorded empty: dicts, and hook lists and sets
    full: list[dict]  # the other dicts but the weight tables
    sizes: list[int]
    keys: list[Any]
    objects: list[Any]
    types: list[type]
    pick: Callable[[list[Any]], tuple[Any, ...]]  # the objects compared by identity
    identical: tuple[Any, ...]  # those objects
    sized: list[Any]  # the other tables that are not dicts: by length
    lengths: list[int]
    weight_tables: list[dict]  # the non-empty parameter and buffer tables
    weight_keys: list[Any]
    in_tables: list[torch.Tensor | None]  # their values
    tensors: list[torch.Tensor]  # the weights, then the tensor attributes
    versions: list[int]
    pointers: list[int]
    attributes: list[tuple[dict[str, Any], str, torch.Tensor]]  # tensor attributes
    # plain containers: (state, key, recorded form, its _flat form or None)
    deep: list[tuple[dict[str, Any], str, Any, Any]]

    @staticmethod
    def of(tree: list[tuple[dict, dict, str]], weights: list[_Weight],
           held: list[_Held]) -> _Snapshot:
        tables: dict[int, Any] = {}
        for table, _, _ in tree:
            tables[id(table)] = table
        weight_tables = {id(w.table): w.table for w in weights}
        for h in held:
            tables[id(h.state)] = h.state
            for t in h.tables:
                tables[id(t)] = t
        tables = {i: t for i, t in tables.items() if i not in weight_tables}
        empty = [t for t in [*tables.values(), *weight_tables.values()] if not t]
        full = [t for t in tables.values() if t and isinstance(t, dict)]
        sized = [t for t in tables.values() if t and not isinstance(t, dict)]
        weighed = [t for t in weight_tables.values() if t]
        deep = [(h.state, k, h.kept[k]) for h in held for k in h.deep]
        attributes = [(state, k, state[k]) for state, k, _ in deep
                      if isinstance(state[k], torch.Tensor)]
        in_tables = list(chain.from_iterable(map(dict.values, weighed)))  # None: no bias
        tensors = [*(t for t in in_tables if t is not None), *(t for _, _, t in attributes)]
        objects = list(chain.from_iterable(map(dict.values, full)))
        recorded_empty = set(map(id, empty))
        identity = [i for i, o in enumerate(objects)
                    if type(o) not in _PLAIN_TYPES and id(o) not in recorded_empty]
        pick = _picker(identity)
        return _Snapshot(empty, full, list(map(len, full)), list(chain.from_iterable(full)),
                         objects, list(map(type, objects)), pick, pick(objects), sized,
                         list(map(len, sized)), weighed, list(chain.from_iterable(weighed)),
                         in_tables, tensors, list(map(_VERSION, tensors)),
                         list(map(torch.Tensor.data_ptr, tensors)), attributes,
                         [(state, key, kept, _flat(kept)) for state, key, kept in deep
                          if not isinstance(kept, _Identity)])

    def unchanged(self) -> bool:
        full, weighed = self.full, self.weight_tables
        try:
            if (any(self.empty) or list(map(len, full)) != self.sizes
                    or list(chain.from_iterable(full)) != self.keys):
                return False
            now = list(chain.from_iterable(map(dict.values, full)))
            if (now != self.objects or list(map(type, now)) != self.types
                    or not all(map(operator.is_, self.pick(now), self.identical))):
                return False
        except Exception:  # an `==` that is not a bool (a tensor, an array): changed, to be safe
            return False
        if (list(map(len, self.sized)) != self.lengths
                or list(chain.from_iterable(weighed)) != self.weight_keys
                or not all(map(operator.is_, chain.from_iterable(map(dict.values, weighed)),
                               self.in_tables))
                or list(map(_VERSION, self.tensors)) != self.versions
                or list(map(torch.Tensor.data_ptr, self.tensors)) != self.pointers):
            return False
        for state, key, tensor in self.attributes:
            if state.get(key) is not tensor:
                return False
        for state, key, kept, flat in self.deep:
            now = state.get(key, _MISSING)
            if flat is not None:
                if _flat(now) != flat:
                    return False
            elif not _same(kept, _recorded_now(now)):
                return False
        return True


def _picker(indices: list[int]) -> Callable[[list[Any]], tuple[Any, ...]]:
    """The items of a list at `indices`, as a tuple, in one C-level call (operator.itemgetter,
    which returns a lone item bare and takes no empty list of indices)."""
    if not indices:
        return lambda items: ()
    if len(indices) == 1:
        index = indices[0]
        return lambda items: (items[index],)
    return operator.itemgetter(*indices)


def _flat(value: Any) -> Any:
    """A container of values of the exact plain types as one form that `==` compares at C
    level exactly as _same compares the container: its type, its items in order (a dict's
    pairs; a set's as (type, value) pairs) and their types; None for any other value. A NaN
    that is not the recorded object makes the forms differ: a detailed check then finds it
    equal, as _same does."""
    kind = type(value)
    if kind is dict:
        keys, values = list(map(type, value)), list(map(type, value.values()))
        if _PLAIN_TYPES.issuperset(keys) and _PLAIN_TYPES.issuperset(values):
            return kind, list(value.items()), keys, values
    elif kind is list or kind is tuple:
        types = list(map(type, value))
        if _PLAIN_TYPES.issuperset(types):
            return kind, list(value), types
    elif kind is set or kind is frozenset:
        pairs = frozenset(zip(map(type, value), value, strict=True))
        if _PLAIN_TYPES.issuperset(item_type for item_type, _ in pairs):
            return kind, pairs
    return None


@dataclass
class _Held:
    """One `__dict__`'s recorded values. unchanged() is the per-call check: the values by
    identity, hook tables by length, mutable containers and tensors by
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
        # By identity: an equal object of another type is for changes() to judge (_same).
        if len(state) != self.size or not all(
                map(operator.is_, map(state.get, self.keys), self.objects)):
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
