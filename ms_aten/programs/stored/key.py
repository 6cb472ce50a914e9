"""The key of a stored capture (store.py): everything that changes the program ms_aten derives
from a module (capture_parts) or a function (function_parts), as named parts, so that a miss can
say which part differs.

A part is a mapping of names to digests: `classes` has one per module class, `attributes` one
per submodule, `weights` one per parameter and buffer, and so on. The key is the digest of all
of them. Python values are described (`Describer`) by what they are, never by where they live:
a function by its code, the constants and names it reads, the globals those names find and its
closure's cells; a class by its source and its methods; any other object (a HuggingFace config)
by all its fields, the private ones too (`to_dict()` leaves out `_attn_implementation`); a tensor
that is no parameter or buffer by its shape, dtype and bytes. What cannot be described so (a
class whose source cannot be read: made by `exec`, in a notebook cell) raises Uncacheable,
and the model is captured every time.
"""
from __future__ import annotations

import enum
import functools
import hashlib
import importlib
import inspect
import json
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import mindspore
import torch
from torch.utils import _pytree as pytree

from ..._version import __version__
from ...native.library import LIBRARY
from ..capture.autograd_functions import global_reads

Parts = dict[str, dict[str, str]]

# The packages whose own classes and functions their versions cover (the key names the
# versions, and Python's for its standard library): torch.nn's modules and functions are
# described by name, not by their code.
_VERSIONED = frozenset({"torch", "mindspore", "numpy", "ms_aten", *sys.stdlib_module_names})
# How deep an object's attributes are described (a config inside a module inside a list...).
_DEPTH = 8
# Packages whose objects (locks, loggers, weak references, threads) a module may hold but no
# capture reads: described by their type.
_MACHINERY = frozenset({"_thread", "threading", "logging", "weakref", "_weakref", "_weakrefset"})
# Fields of an object that change from process to process and no capture reads: transformers'
# GenerationConfig keeps a hash() of itself, salted per process.
_VOLATILE = frozenset({"_original_object_hash"})
# Module attributes that are the module's own machinery, described elsewhere (weights,
# submodules, modes) or not at all (the hooks' id counters).
_OWN = frozenset({"_parameters", "_buffers", "_modules", "training", "_non_persistent_buffers_set",
                  "_compiled_call_impl"})


class Uncacheable(Exception):
    """Why a model's capture is not stored: something its key cannot see."""


def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _top(module_name: str | None) -> str:
    return (module_name or "").split(".")[0]


def versioned(module_name: str | None) -> bool:
    """Whether a module's code is covered by a version in the key rather than by its code."""
    return _top(module_name) in _VERSIONED


@functools.cache
def _installed_file(module_name: str) -> str | None:
    """The file of a module an installed package holds (site-packages), whose version and file
    digest describe its code; None for the user's own code."""
    path = getattr(sys.modules.get(module_name), "__file__", None)
    if path is None or not any(part in ("site-packages", "dist-packages")
                               for part in Path(path).parts):
        return None
    return path


@functools.cache
def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:32]


@functools.cache
def ms_aten_digest() -> str:
    """ms_aten's own code: its Python files and its built library (a development tree's version
    string does not change with its code)."""
    package = Path(__file__).resolve().parents[2]
    files = sorted(package.rglob("*.py"))
    return digest([(p.relative_to(package).as_posix(), _file_digest(str(p))) for p in files]
                  + [_file_digest(str(LIBRARY))])


class Describer:
    """json-able descriptions of Python values (see the module's docstring). `weights`: the
    module's parameters and buffers by id, described by name (their values are the Cell's)."""

    def __init__(self, weights: Mapping[int, str] | None = None, *,
                 whole_objects: bool = False) -> None:
        self.weights = dict(weights or {})
        # A function's capture (function_parts): what a module's capture describes elsewhere
        # (module_parts: its classes, its weights by name) is described here by value: an
        # object's class by its code, a method's module by all its fields (its weights by
        # their bytes, which the program holds as constants).
        self.whole_objects = whole_objects
        self.memo: dict[int, Any] = {}
        self.packages: dict[str, str] = {}  # the top-level packages met -> their versions
        self._alive: list[Any] = []  # what memo's ids name, alive while they are keys

    def value(self, v: Any, depth: int = 0) -> Any:
        if v is None or isinstance(v, (bool, int, float, str, bytes, complex)) \
                and not isinstance(v, enum.Enum):
            return repr(v)
        if isinstance(v, enum.Enum):
            return f"{type(v).__module__}.{type(v).__qualname__}.{v.name}"
        if isinstance(v, (torch.dtype, torch.device, torch.Size, torch.layout,
                          torch.memory_format)):
            return f"{type(v).__name__} {v}"
        if isinstance(v, torch.Tensor):
            name = self.weights.get(id(v))
            return f"weight {name}" if name is not None else self._tensor(v)
        if isinstance(v, types.FunctionType):  # memoized by function(), by its own mark
            return self.function(v)
        if id(v) in self.memo:
            return self.memo[id(v)]
        self.memo[id(v)] = f"cycle {type(v).__qualname__}"  # until described: a cycle
        self._alive.append(v)
        described = self._object(v, depth)
        self.memo[id(v)] = described
        return described

    def _object(self, v: Any, depth: int) -> Any:
        if isinstance(v, (tuple, list)):
            return [type(v).__qualname__, [self.value(x, depth + 1) for x in v]]
        if isinstance(v, (set, frozenset)):
            return [type(v).__qualname__, sorted(json.dumps(self.value(x, depth + 1),
                                                            default=str) for x in v)]
        if isinstance(v, Mapping):
            return [type(v).__qualname__, [[self.value(k, depth + 1), self.value(x, depth + 1)]
                                           for k, x in v.items()]]
        if isinstance(v, types.ModuleType):
            return f"module {v.__name__}"
        if isinstance(v, type):
            return self.cls(v)
        if isinstance(v, functools.partial):
            return ["partial", self.value(v.func, depth + 1), self.value(v.args, depth + 1),
                    self.value(v.keywords, depth + 1)]
        if isinstance(v, types.MethodType):
            owner = v.__self__
            return ["method", self.function(v.__func__),
                    f"of {type(owner).__qualname__}" if isinstance(owner, torch.nn.Module)
                    and not self.whole_objects else self.value(owner, depth + 1)]
        if callable(v) and not hasattr(v, "__dict__"):  # a builtin: torch.relu, len
            return f"builtin {getattr(v, '__module__', '')}.{getattr(v, '__qualname__', v)}"
        if depth > _DEPTH or _top(type(v).__module__) in _MACHINERY:
            return f"object {self._type(type(v))}"
        state = getattr(v, "__dict__", None)
        slots = [s for c in type(v).__mro__ for s in getattr(c, "__slots__", ())]
        if state is None and not slots:
            text = repr(v)
            if " at 0x" in text:
                raise Uncacheable(f"an attribute of type {self._type(type(v))} has no "
                                  f"description but its address")
            return [self._type(type(v)), text]
        fields = {k: x for k, x in (state or {}).items() if k not in _VOLATILE}
        fields.update({s: getattr(v, s) for s in slots if isinstance(s, str) and hasattr(v, s)})
        kind = self.cls(type(v)) if self.whole_objects else self._type(type(v))
        return [kind, [[k, self.value(x, depth + 1)] for k, x in sorted(fields.items())]]

    def _type(self, cls: type) -> str:
        self._package(cls.__module__)
        return f"{cls.__module__}.{cls.__qualname__}"

    def _package(self, module_name: str | None) -> None:
        top = _top(module_name)
        if top and top not in self.packages and top not in sys.stdlib_module_names \
                and top != "__main__":
            self.packages[top] = str(getattr(sys.modules.get(top), "__version__", ""))

    def _tensor(self, t: torch.Tensor) -> str:
        t = t.detach()
        head = f"tensor {t.dtype}{list(t.shape)} {t.requires_grad}"
        if t.device.type == "meta" or t.is_sparse or t.dtype in (torch.qint8, torch.quint8):
            return head
        data = t.contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes() \
            if t.numel() else b""
        return f"{head} {hashlib.sha256(data).hexdigest()[:32]}"

    def cls(self, cls: type) -> str:
        """A class: its name; and unless a versioned package owns it, its source and every
        method's code (a method assigned to the class later is not in its source)."""
        name = self._type(cls)
        if versioned(cls.__module__):
            return name
        installed = _installed_file(cls.__module__)
        if installed is not None:
            return f"{name} {_file_digest(installed)}"
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError) as error:
            raise Uncacheable(f"the source of class {name} cannot be read ({error})") from None
        methods = []
        for attr, member in sorted(vars(cls).items()):
            for fn in _functions_of(member):
                methods.append([attr, self.function(fn)])
        return digest([name, source, methods])

    def function(self, fn: Callable) -> Any:
        """A Python function by what decides what it does: its code (constants, names), its
        defaults, its closure's cells and the globals its code names (recursively)."""
        module_name = getattr(fn, "__module__", None)
        if versioned(module_name) or not isinstance(fn, types.FunctionType):
            self._package(module_name)
            return f"function {module_name}.{getattr(fn, '__qualname__', fn)}"
        installed = _installed_file(module_name or "")
        if installed is not None:  # the file's digest covers the code of its package's file
            self._package(module_name)
            return f"function {module_name}.{fn.__qualname__} {_file_digest(installed)}"
        key = id(fn)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = f"function {fn.__qualname__}"  # a recursive function: by name within
        self._alive.append(fn)
        self._package(module_name)
        code = fn.__code__
        names = sorted(global_reads(code))
        scope = fn.__globals__
        found = [[name, self._reached(scope[name], names)] for name in names if name in scope]
        closure = [self._reached(cell.cell_contents, names) if _filled(cell) else "empty"
                   for cell in fn.__closure__ or ()]
        described = digest([f"{module_name}.{fn.__qualname__}", _code(code), found, closure,
                            self.value(fn.__defaults__, 1), self.value(fn.__kwdefaults__, 1)])
        self.memo[key] = described
        return described

    def _reached(self, value: Any, names: list[str]) -> Any:
        """A global or a closure's cell a function's code reads. A module (`helpers.fn(x)`,
        an `import helpers` in the enclosing function) by its members that the code names:
        every one of the user's own module (functions, classes, constants), the functions and
        classes of an installed package's (its file's digest covers the rest)."""
        if not isinstance(value, types.ModuleType) or versioned(value.__name__):
            return self.value(value, 1)
        own = _installed_file(value.__name__) is None
        return [value.__name__, [
            [member, self.value(getattr(value, member), 1)] for member in names
            if hasattr(value, member) and not isinstance(getattr(value, member), types.ModuleType)
            and (own or _is_code(getattr(value, member)))]]


def _is_code(value: Any) -> bool:
    return isinstance(value, (types.FunctionType, type))


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
    except ValueError:
        return False
    return True


def _functions_of(member: Any) -> Iterable[Callable]:
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    if isinstance(member, property):
        return [f for f in (member.fget, member.fset) if f is not None]
    return [member] if isinstance(member, types.FunctionType) else []


def _code(code: types.CodeType) -> list[Any]:
    return [code.co_code.hex(), [_constant(c) for c in code.co_consts], list(code.co_names),
            code.co_argcount, code.co_kwonlyargcount, code.co_flags]


def _constant(value: Any) -> Any:
    """A code object's constant; a frozenset's members in order (their repr's order changes
    with the process's hash seed)."""
    if isinstance(value, types.CodeType):
        return _code(value)
    if isinstance(value, frozenset):
        return sorted(repr(v) for v in value)
    return repr(value)


def resolve(module_name: str, qualname: str) -> Any:
    """The object a module's name and a qualified name find, or Uncacheable."""
    if "<locals>" in qualname:
        raise Uncacheable(f"{module_name}.{qualname} is defined inside a function: another "
                          f"process cannot find it")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as error:
        raise Uncacheable(f"{module_name}.{qualname} cannot be found by name ({error})") from None
    return found


def module_parts(module: torch.nn.Module, describer: Describer) -> Parts:
    """The parts of the key a module gives: its classes, each submodule's attributes, each
    parameter's and buffer's name, shape, dtype and requires_grad."""
    classes: dict[str, str] = {}
    attributes: dict[str, str] = {}
    for name, m in module.named_modules(remove_duplicate=False):
        for cls in type(m).__mro__:
            key = f"{cls.__module__}.{cls.__qualname__}"
            if key not in classes and cls is not object:
                classes[key] = describer.value(cls)
        described = []
        for attr, value in sorted(vars(m).items()):
            if attr in _OWN:
                continue
            try:
                described.append([attr, describer.value(value)])
            except Uncacheable as why:
                raise Uncacheable(f"{name or 'the model'}.{attr}: {why}") from None
        attributes[name or "(root)"] = digest(described)
    # A gradient hook on a weight is refused at capture (capture/hooks.py): a key that holds
    # it misses, and the capture that follows refuses it.
    weights = {name: f"{list(t.shape)} {t.dtype} {t.requires_grad}" + (
        " hooked" if t._backward_hooks or getattr(t, "_post_accumulate_grad_hooks", None)
        else "") for name, t in [*module.named_parameters(remove_duplicate=False),
                                 *module.named_buffers(remove_duplicate=False)]}
    persistent = {name: str(sorted(m._non_persistent_buffers_set))
                  for name, m in module.named_modules() if m._non_persistent_buffers_set}
    return {"classes": classes, "attributes": attributes, "weights": weights,
            "non-persistent buffers": persistent}


def versions(describer: Describer) -> dict[str, str]:
    return {"python": sys.version.split()[0], "torch": torch.__version__,
            "mindspore": mindspore.__version__, "ms_aten": __version__,
            "ms_aten code": ms_aten_digest(),
            **{f"package {k}": v for k, v in sorted(describer.packages.items())}}


def _global_hooks() -> dict[str, Any]:
    modules = torch.nn.modules.module
    return {name: getattr(modules, name) for name in (
        "_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_pre_hooks",
        "_global_forward_hooks", "_global_forward_hooks_with_kwargs",
        "_global_forward_hooks_always_called")}


def state() -> dict[str, str]:
    """What torch's global state gives every capture: the default dtype, autocast, grad mode."""
    return {"default dtype": str(torch.get_default_dtype()),
            "autocast": str([torch.is_autocast_enabled("cpu"),
                             torch.get_autocast_dtype("cpu")]),
            "grad enabled": str(torch.is_grad_enabled())}


def inputs_part(describer: Describer, args: tuple, kwargs: Mapping[str, Any],
                dynamic_shapes: Any) -> dict[str, str]:
    """The example call's structure (tensors by shape, dtype and requires_grad) and its
    dynamic dims (each Dim by name and range)."""
    call = pytree.tree_map_only(
        torch.Tensor, lambda t: f"tensor {t.dtype}{list(t.shape)} {t.requires_grad}",
        (args, dict(kwargs)))
    return {"inputs": json.dumps(describer.value(call), default=str),
            "dynamic shapes": json.dumps(_dynamic(dynamic_shapes), default=str)}


def _dynamic(spec: Any) -> Any:
    if isinstance(spec, Mapping):
        return {str(k): _dynamic(v) for k, v in spec.items()}
    if isinstance(spec, (tuple, list)):
        return [_dynamic(v) for v in spec]
    name = getattr(spec, "__name__", None)
    if name is not None and hasattr(spec, "min"):
        return f"Dim {name} {spec.min} {spec.max}"
    return repr(spec)


def capture_parts(module: torch.nn.Module, *, cell: type, options: Mapping[str, Any],
                  modes: Mapping[str, bool], autocast: torch.dtype | None, args: tuple,
                  kwargs: Mapping[str, Any], dynamic_shapes: Any,
                  compile_target: Mapping[str, Any] | None = None) -> Parts:
    """Every part of the key of one capture of `module` by a Cell of class `cell`; Uncacheable
    for what the key cannot see."""
    named = [*module.named_parameters(remove_duplicate=False),
             *module.named_buffers(remove_duplicate=False)]
    describer = Describer({id(t): name for name, t in named})
    model = {"module": f"{type(module).__module__}.{type(module).__qualname__}",
             "cell": f"{cell.__module__}.{cell.__qualname__}"}
    parts = module_parts(module, describer)
    parts["cell"] = {"class": describer.cls(cell),
                     **{k: digest(describer.value(v)) for k, v in sorted(options.items())}}
    parts["modes"] = {name or "(root)": "train" if mode else "eval"
                      for name, mode in modes.items()}
    parts["state"] = {**state(), "captured under autocast": str(autocast)}
    # torch's hooks on every module: traced (forward ones) or opaque regions (backward ones)
    parts["global hooks"] = {name: digest(describer.value(dict(hooks)))
                             for name, hooks in _global_hooks().items() if hooks}
    parts["inputs"] = inputs_part(describer, args, kwargs, dynamic_shapes)
    if compile_target is not None:
        parts["compiled for"] = {k: str(v) for k, v in compile_target.items()}
    parts["versions"] = versions(describer)
    parts["model"] = model
    return parts


def function_parts(fn: Callable, *, cell: type, options: Mapping[str, Any], args: tuple,
                   kwargs: Mapping[str, Any], dynamic_shapes: Any,
                   compile_target: Mapping[str, Any] | None = None) -> Parts:
    """Every part of the key of one capture of the function `fn` by a Cell of class `cell`
    (ms_aten.function): its code and everything it reaches (the functions it calls, the globals
    it names, its closure's cells and defaults: a tensor there by its bytes, an object by its
    class's code and all its fields), the inputs, torch's state and the options; Uncacheable
    for what the key cannot see."""
    describer = Describer(whole_objects=True)
    name = f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    # A callable object (a Module, a class with __call__) by its class's code and its fields.
    code = {"function": json.dumps(describer.value(fn), default=str)}
    if not isinstance(fn, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        code["class"] = describer.cls(type(fn))
    parts: Parts = {"function": code}
    parts["cell"] = {"class": describer.cls(cell),
                     **{k: digest(describer.value(v)) for k, v in sorted(options.items())}}
    parts["state"] = state()
    parts["inputs"] = inputs_part(describer, args, kwargs, dynamic_shapes)
    if compile_target is not None:
        parts["compiled for"] = {k: str(v) for k, v in compile_target.items()}
    parts["versions"] = versions(describer)
    parts["model"] = {"function": name, "cell": f"{cell.__module__}.{cell.__qualname__}"}
    return parts
