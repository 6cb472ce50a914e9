"""The structure of a captured call, as torch.export sees it (torch.utils._pytree): which of a
call's arguments, given by position or keyword and nested in tuples, lists, dicts or any pytree
node, are the program's inputs; which are constants of the capture (use_cache=False, None, an
int); and how the program's outputs nest.

A Cell runs its program on the flat tensor leaves. A call from Python matches its arguments to
the capture's here (Inputs.flatten, with torch's pytree). A call that MindSpore compiles as part
of another graph cannot run Python: `pick` and `build` below are written in MindSpore's graph
syntax and read only the constant tuples that Inputs and output_nodes prepare.
"""
from __future__ import annotations

import inspect
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from mindspore import Tensor
from torch.utils import _pytree as pytree

# The keyword by which a call from Python hands construct the flat inputs it has matched.
LEAVES = "ms_aten_leaves"

# A tensor's place among an argument's leaves at capture (the other places hold constants).
_TENSOR = "<tensor>"

Key = int | str
# Where a graph finds a tensor leaf: (position, keyword, keys into the argument's value);
# position -1: never positional, keyword "": never by keyword (an element of *args).
Source = tuple[int, str, tuple[Key, ...]]
# A node of the output structure: (kind, keys, children), children indexing the values built
# so far (the leaves first); kind: dict, list, tuple or none.
Node = tuple[str, tuple[str, ...], tuple[int, ...]]


@dataclass(frozen=True)
class Argument:
    """One top-level argument of the captured call."""

    label: str  # how messages name it: the parameter's name; *xs's second element: xs.1
    position: int  # where a call may give it by position, -1 where it may not
    keyword: str  # the keyword a call may give it by, "" where it may not
    spec: pytree.TreeSpec  # its value's structure at capture
    leaves: tuple[Any, ...]  # its value's leaves at capture, _TENSOR for each tensor
    group: str = ""  # the *args or **kwargs parameter it is an element of, or ""
    dynamic: Any = None  # its dynamic_shapes spec, in its value's structure

    @property
    def constant(self) -> bool:
        """Holds no tensor: all of it is a constant of the capture."""
        return _TENSOR not in self.leaves

    def describe(self) -> str:
        if self.constant:
            return f"{self.label}={pytree.tree_unflatten(list(self.leaves), self.spec)!r}"
        return self.label


def _key(entry: Any) -> Key:
    """A pytree path entry as the key that indexes a tuple, list or dict."""
    for name in ("idx", "key", "name"):
        if hasattr(entry, name):
            return getattr(entry, name)
    return str(entry)


def _parameters(fn: Callable | None) -> list[inspect.Parameter] | None:
    if fn is None:
        return None
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature
        return None


class Inputs:
    """The captured call's arguments, bound to `fn`'s signature (a module's forward, a
    function): a call may give each by position or by keyword, as Python would bind it."""

    def __init__(self, fn: Callable | None, args: tuple, kwargs: Mapping[str, Any], owner: str,
                 dynamic_shapes: Any = None):
        self.owner = owner
        self.args, self.kwargs = args, dict(kwargs)
        parameters = _parameters(fn)
        if parameters is None:  # positional only: input0, input1, ...
            if kwargs:
                raise TypeError(f"{owner} has no signature to bind keyword inputs to")
            parameters = [inspect.Parameter(f"input{i}", inspect.Parameter.POSITIONAL_ONLY)
                          for i in range(len(args))]
        arguments = self._bind(parameters, args, kwargs)
        dynamic = self._dynamic(arguments, dynamic_shapes)
        self.arguments = tuple(
            Argument(label, position, keyword, *self._template(value), group, dynamic.get(label))
            for label, position, keyword, group, value in arguments)
        self._by_position = {a.position: a for a in self.arguments if a.position >= 0}
        self._by_keyword = {a.keyword: a for a in self.arguments if a.keyword}
        names, sources, dims = [], [], {}
        for argument, (*_, value) in zip(self.arguments, arguments, strict=True):
            for path, leaf in pytree.tree_flatten_with_path(value)[0]:
                if isinstance(leaf, torch.Tensor):
                    keys = tuple(_key(entry) for entry in path)
                    names.append(".".join([argument.label, *map(str, keys)]))
                    sources.append((argument.position, argument.keyword, keys))
            for (leaf, dim), name in self._dim_names(argument, value).items():
                dims[(len(names) - argument.leaves.count(_TENSOR) + leaf, dim)] = name
        self.names: tuple[str, ...] = tuple(names)
        self.sources: tuple[Source, ...] = tuple(sources)
        self.dim_names: dict[tuple[int, int], str] = dims
        # The graph's checks of a call (pick): its keywords, positions, and the constants.
        self.keywords = tuple(self._by_keyword)
        self.n_positions = 1 + max(self._by_position, default=-1)
        # (position, keyword, value, its repr): MindSpore's f-strings write False as false.
        self.constants = tuple((a.position, a.keyword, a.leaves[0], repr(a.leaves[0]))
                               for a in self.arguments if a.constant and a.spec.is_leaf())
        self.expected = ", ".join(a.describe() for a in self.arguments)

    @classmethod
    def of(cls, fn: Callable, args: Any, kwargs: Any, caller: str, owner: str,
           dynamic_shapes: Any = None) -> Inputs:
        """Inputs of `fn` called with args and kwargs as torch.export takes them (`caller`
        names the API for messages), or TypeError."""
        if not isinstance(args, tuple):
            raise TypeError(f"{caller}: args must be a tuple (of torch tensors, or any pytree "
                            f"of them), got {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise TypeError(f"{caller}: kwargs must be a dict, got {type(kwargs).__name__}")
        kwargs = dict(kwargs or {})
        if not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves((args, kwargs))):
            raise TypeError(f"{caller}: args and kwargs hold no torch tensor")
        try:
            return cls(fn, args, kwargs, owner, dynamic_shapes)
        except TypeError as error:
            raise TypeError(f"{caller}: {error}") from None

    @classmethod
    def by_position(cls, n: int, owner: str) -> Inputs:
        """n tensors by position (input0, input1, ...): a program's inputs as they are."""
        return cls(None, tuple(torch.empty(0) for _ in range(n)), {}, owner)

    def _bind(self, parameters: list[inspect.Parameter], args: tuple,
              kwargs: Mapping[str, Any]) -> list[tuple[str, int, str, str, Any]]:
        """(label, position, keyword, group, value) of each argument the capture gives."""
        P = inspect.Parameter
        positional = [p for p in parameters if p.kind in (P.POSITIONAL_ONLY,
                                                          P.POSITIONAL_OR_KEYWORD)]
        var_positional = next((p for p in parameters if p.kind is P.VAR_POSITIONAL), None)
        named = {p.name: p for p in parameters
                 if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)}
        var_keyword = next((p for p in parameters if p.kind is P.VAR_KEYWORD), None)
        bound: list[tuple[str, int, str, str, Any]] = []
        for i, value in enumerate(args):
            if i < len(positional):
                p = positional[i]
                bound.append((p.name, i, p.name if p.kind is P.POSITIONAL_OR_KEYWORD else "",
                              "", value))
            elif var_positional is not None:
                bound.append((f"{var_positional.name}.{i - len(positional)}", i, "",
                              var_positional.name, value))
            else:
                raise TypeError(f"{self.owner} takes {len(positional)} positional inputs, "
                                f"got {len(args)}")
        taken = {label for label, *_ in bound}
        for name, value in kwargs.items():
            if name in taken:
                raise TypeError(f"{self.owner}: input '{name}' given by position and keyword")
            group = ""
            if name in named:
                p = named[name]
                position = positional.index(p) if p in positional else -1
            elif var_keyword is not None:
                position, group = -1, var_keyword.name
            else:
                raise TypeError(f"{self.owner} has no input '{name}'; its inputs: "
                                f"{', '.join(p.name for p in parameters)}")
            bound.append((name, position, name, group, value))
        return bound

    @staticmethod
    def _template(value: Any) -> tuple[pytree.TreeSpec, tuple[Any, ...]]:
        leaves, spec = pytree.tree_flatten(value)
        return spec, tuple(_TENSOR if isinstance(x, torch.Tensor) else x for x in leaves)

    def _dynamic(self, arguments: list[tuple[str, int, str, str, Any]],
                 dynamic_shapes: Any) -> dict[str, Any]:
        """dynamic_shapes by argument label: given by name (a dict; the elements of *xs as
        one sequence under xs), or one per argument in order (a tuple or list)."""
        labels = [label for label, *_ in arguments]
        if dynamic_shapes is None:
            return {}
        if isinstance(dynamic_shapes, dict):
            by_label: dict[str, Any] = {}
            for name, spec in dynamic_shapes.items():
                elements = [label for label in labels if label.startswith(f"{name}.")]
                if name in labels:
                    by_label[name] = spec
                elif elements and isinstance(spec, (tuple, list)) and len(spec) == len(elements):
                    by_label.update(zip(elements, spec, strict=True))
                else:
                    raise TypeError(f"{self.owner}: dynamic_shapes names '{name}', which is not "
                                    f"among the inputs {labels}")
            return by_label
        if isinstance(dynamic_shapes, (tuple, list)) and len(dynamic_shapes) == len(labels):
            return dict(zip(labels, dynamic_shapes, strict=True))
        raise TypeError(f"{self.owner}: dynamic_shapes must give one spec per input "
                        f"({len(labels)}: {', '.join(labels)}), or a dict of them by name; got "
                        f"{dynamic_shapes!r}")

    @staticmethod
    def _dim_names(argument: Argument, value: Any) -> dict[tuple[int, int], str]:
        """(tensor leaf within the argument, dim) -> the Dim's name its spec gives, for
        messages (torch.export checks the spec's structure against the value's)."""
        if argument.dynamic is None:
            return {}
        by_tensor: dict[int, Any] = {}

        def record(_path, leaf, spec):
            if isinstance(leaf, torch.Tensor):
                by_tensor.setdefault(id(leaf), spec)

        from torch.export.dynamic_shapes import _tree_map_with_path
        try:
            _tree_map_with_path(record, value, argument.dynamic, tree_name=argument.label)
        except Exception:  # noqa: BLE001  (torch.export reports the mismatch when it captures)
            return {}
        names: dict[tuple[int, int], str] = {}
        tensors = [x for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]
        for index, tensor in enumerate(tensors):
            spec = by_tensor.get(id(tensor))
            dims = spec.items() if isinstance(spec, dict) else enumerate(spec or ())
            for dim, dim_spec in dims:
                name = getattr(dim_spec, "__name__", None)
                if isinstance(name, str):
                    names[(index, dim)] = name
        return names

    def as_positional(self, args: tuple, kwargs: Mapping[str, Any]) -> tuple:
        """A call's args and kwargs as FunctionModule's positional inputs."""
        return (*args, *kwargs.values())

    def torch_dynamic_shapes(self, signature_of: str) -> Any:
        """dynamic_shapes for torch.export, in the structure of its combined arguments: by the
        forward's parameter names ("forward"), or as FunctionModule's `*args` ("args", the
        keyword inputs last)."""
        if all(a.dynamic is None for a in self.arguments):
            return None
        if signature_of == "args":
            return {"args": tuple(a.dynamic for a in self.arguments)}
        shapes: dict[str, Any] = {}
        for a in self.arguments:
            if a.group and not a.keyword:  # an element of *args
                shapes[a.group] = (*shapes.get(a.group, ()), a.dynamic)
            elif a.group:  # an entry of **kwargs
                shapes[a.group] = {**shapes.get(a.group, {}), a.keyword: a.dynamic}
            else:
                shapes[a.label] = a.dynamic
        return shapes

    def example(self, tensors: list[torch.Tensor]) -> tuple[tuple, dict[str, Any]]:
        """The captured call's args and kwargs with these tensors in the tensors' places."""
        leaves, spec = pytree.tree_flatten((self.args, self.kwargs))
        fill = iter(tensors)
        args, kwargs = pytree.tree_unflatten(
            [next(fill) if isinstance(x, torch.Tensor) else x for x in leaves], spec)
        return args, kwargs

    def flatten(self, args: tuple, kwargs: Mapping[str, Any]) -> list[Any]:
        """The tensor leaves of a call from Python, in the program's order (whatever the call
        gives in a tensor's place); TypeError naming the expected inputs for an argument the
        capture did not take, a missing one, another structure, or a constant other than the
        capture's."""
        given: dict[str, Any] = {}
        for i, value in enumerate(args):
            argument = self._by_position.get(i)
            if argument is None:
                raise TypeError(f"{self.owner} got {len(args)} inputs by position, where it was "
                                f"captured with {self.n_positions}: {self.expected}")
            given[argument.label] = value
        for name, value in kwargs.items():
            argument = self._by_keyword.get(name)
            if argument is None:
                raise TypeError(f"{self.owner} got an unexpected keyword input '{name}'; it was "
                                f"captured with {self.expected}")
            if argument.label in given:
                raise TypeError(f"{self.owner}: input '{name}' given by position and keyword")
            given[argument.label] = value
        leaves: list[Any] = []
        for argument in self.arguments:
            if argument.label not in given:
                if argument.constant:
                    continue  # a constant the call leaves out keeps the capture's value
                raise TypeError(f"{self.owner} is missing the input '{argument.label}'; it was "
                                f"captured with {self.expected}")
            values, spec = pytree.tree_flatten(given[argument.label])
            if spec != argument.spec:
                raise TypeError(f"{self.owner}: input '{argument.label}' is {_describe(spec)}, "
                                f"where the capture's was {_describe(argument.spec)}")
            for value, captured in zip(values, argument.leaves, strict=True):
                if captured is _TENSOR:  # the Cell checks it is a Tensor (runtime/cell.py)
                    leaves.append(value)
                elif not _same_constant(value, captured):
                    raise TypeError(
                        f"{self.owner}: input '{argument.label}' differs from the capture's "
                        f"constant {captured!r} (got {value!r}); a capture serves the "
                        f"constants it was made with")
        return leaves


def _describe(spec: pytree.TreeSpec) -> str:
    """A structure on one line: list(*, dict(a: *, b: *)); * for a leaf."""
    if spec.is_leaf():
        return "*"
    keys = _field_names(spec)
    children = [_describe(child) for child in spec.children()]
    if keys is not None:
        children = [f"{key}: {child}" for key, child in zip(keys, children, strict=True)]
    return f"{spec.type.__name__}({', '.join(children)})"


def _same_constant(value: Any, captured: Any) -> bool:
    if isinstance(value, (Tensor, torch.Tensor)):
        return False
    return type(value) is type(captured) and value == captured


def flat_nodes(n: int) -> tuple[Node, ...]:
    """The output structure of a program's n outputs as they are: a Tensor, or a tuple."""
    return () if n == 1 else (("tuple", (), tuple(range(n))),)


def output_nodes(spec: pytree.TreeSpec) -> tuple[Node, ...]:
    """The output structure as build() makes it: dicts (and ModelOutputs, by field name) as
    dicts, lists as lists, tuples (named ones too) and other pytree nodes as tuples of their
    children; an empty tuple for a lone tensor."""
    nodes: list[Node] = []
    n_leaves = spec.num_leaves

    def visit(node: pytree.TreeSpec, first_leaf: int) -> int:
        """Appends node's nodes; returns its index among the values."""
        if node.is_leaf():
            return first_leaf
        children, leaf = [], first_leaf
        for child in node.children():
            children.append(visit(child, leaf))
            leaf += child.num_leaves
        keys = _field_names(node)
        if node.type is type(None):
            kind = "none"
        elif keys is not None:
            kind = "dict"
        elif node.type is list:
            kind = "list"
        else:
            kind = "tuple"
        nodes.append((kind, keys or (), tuple(children)))
        return n_leaves + len(nodes) - 1

    visit(spec, 0)
    return tuple(nodes)


def _field_names(node: pytree.TreeSpec) -> tuple[str, ...] | None:
    """A mapping node's keys (dict, OrderedDict, defaultdict, a ModelOutput), else None."""
    context = node.context
    if node.type is defaultdict:
        context = context[1]
    elif node.type not in (dict, OrderedDict) and not (
            isinstance(context, list) and len(context) == node.num_children
            and all(isinstance(k, str) for k in context)):
        return None
    return tuple(str(k) for k in context)


# What follows runs inside MindSpore graphs too (a Cell's construct): graph syntax only.

def pick(args, kwargs, source, owner, expected):
    """The tensor leaf at `source` (Source) of a call's args and kwargs."""
    position, keyword, keys = source
    if 0 <= position < len(args):
        value = args[position]
    elif keyword and keyword in kwargs:
        value = kwargs[keyword]
    else:
        raise TypeError(f"{owner} is missing the input '{keyword or position}'; it was "
                        f"captured with {expected}")
    for key in keys:
        value = value[key]
    return value


def check_call(args, kwargs, keywords, n_positions, constants, owner, expected):
    """TypeError for a keyword or position the capture did not take, or a constant argument
    given another value."""
    if len(args) > n_positions:
        raise TypeError(f"{owner} got {len(args)} inputs by position, where it was captured "
                        f"with {n_positions}: {expected}")
    for name in kwargs:
        if name not in keywords:
            raise TypeError(f"{owner} got an unexpected keyword input '{name}'; it was captured "
                            f"with {expected}")
    for position, keyword, captured, text in constants:
        given = False
        value = None
        if 0 <= position < len(args):
            given = True
            value = args[position]
        elif keyword and keyword in kwargs:
            given = True
            value = kwargs[keyword]
        if given and (isinstance(value, Tensor) or value != captured):
            raise TypeError(f"{owner}: input '{keyword or position}' differs from the capture's "
                            f"constant {text}; a capture serves the constants it was made "
                            f"with")


def build(nodes, leaves):
    """The outputs in their structure (output_nodes) from the program's flat outputs."""
    if not nodes:
        return leaves[0]
    values = list(leaves)
    for kind, keys, children in nodes:
        items = [values[i] for i in children]
        if kind == "none":
            values.append(None)
        elif kind == "dict":
            # One key at a time: a dict made by dict(zip(...)) would be a Python object the
            # graph runs by fallback, and gradients stop at it.
            mapping = {}
            for index, key in enumerate(keys):
                mapping[key] = items[index]
            values.append(mapping)
        elif kind == "list":
            values.append(items)
        else:
            values.append(tuple(items))
    return values[-1]
