"""What torch.export refuses, run as an opaque torch call inside the program.

A region (a submodule torch.export refuses, found by partition.py, or a function the user marks
with `ms_aten.opaque`) becomes one node, `ms_aten_opaque::call(key, tensors)`, whose tensors are
the region's weights (its module's parameters and buffers, so their gradients reach the Cell's
Parameters) and then its tensor arguments. At run time the node's Autograd kernel runs the
region's Python as torch eager with grad enabled, its weights substituted
(torch.nn.utils.stateless), so torch autograd records what it did and the program's VJPs (first
and second order) differentiate through that graph. A region that draws random numbers is
`call_random`, tagged as torch tags random ops, so the program carries the RNG state a
recomputing VJP replays. Buffers the region writes are written to copies that the node returns,
and the captured graph copies them into the buffers (a buffer update the program keeps).

Shapes: tracing runs the region on the capture's fake tensors; where that fails (a branch on a
value, a size from `.item()`), the shapes of a real run (partition.py's recording) are used, and
the node checks at every call that its outputs still have them (a size that depends on values
and changed is an error naming the region, never a wrong shape).

Refused by name: a region that writes its inputs in place, writes a parameter, or returns
something other than tensors (and None).

A region (with its torch module) lives in nodes.py's table while the programs that call it do.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, get_proxy_mode
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..base import CaptureError
from . import nodes


class OpaqueWarning(UserWarning):
    """A part of a model runs as an opaque torch call (torch eager, torch autograd) inside its
    program: torch.export refused it, or the user marked it with ms_aten.opaque."""


Meta = tuple[tuple[int, ...], torch.dtype]  # an output's shape and dtype


@dataclass
class Region:
    """One opaque call site: the code it runs and how its node's tensors map onto it."""

    name: str  # what warnings, errors and repr show: "Net.loss (CTCLoss)"
    reason: str  # why it is opaque: torch.export's words, or the user's marker
    function: Callable  # the region's code, called with its arguments
    module: torch.nn.Module | None  # whose weights come first among the node's tensors
    weight_names: tuple[str, ...]
    # Per tensor (weights, then arguments): whether it requires grad in torch eager (a
    # parameter, a value computed from one), for a region that differentiates inside.
    requires_grad: tuple[bool, ...]
    spec: pytree.TreeSpec  # of (args, kwargs)
    constants: tuple[Any, ...]  # the leaves, None where a tensor goes
    tensor_leaves: tuple[int, ...]
    out_spec: pytree.TreeSpec | None = None
    out_tensors: tuple[int, ...] = ()  # the outputs' leaves that are tensors (others None)
    written: tuple[int, ...] = ()  # the buffers (weight indices) it writes, returned after
    needs_grad: bool = False  # it differentiates inside (torch.autograd.grad), or hooks a tensor
    random: bool = False
    # Where the fake run failed: each output's sizes from a real run, a size as a number or as
    # (tensor, dim), the size of one of the node's tensors that the capture keeps dynamic.
    fixed: list[tuple[int | tuple[int, int], ...]] | None = None
    # The outputs' shapes (symbolic where the capture's are) and dtypes, as the capture's run
    # gave them: tracing the node again (run_decompositions) gives them where the region
    # cannot run without autograd.
    metas: list[Meta] = field(default_factory=list)

    def _run(self, tensors: list[torch.Tensor]) -> tuple[Any, list[torch.Tensor]]:
        n = len(self.weight_names)
        weights = [w.clone() if i in self.written else w for i, w in enumerate(tensors[:n])]
        leaves = list(self.constants)
        for position, tensor in zip(self.tensor_leaves, tensors[n:], strict=True):
            leaves[position] = tensor
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        with nodes.setting(_STATE, "running", True):
            if self.module is None:
                return self.function(*args, **kwargs), weights
            with _reparametrize_module(self.module, dict(zip(self.weight_names, weights,
                                                              strict=True)), tie_weights=True):
                return self.function(*args, **kwargs), weights

    def __call__(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The region run as torch eager: its output tensors, then the buffers it wrote."""
        if self.needs_grad:  # as in torch eager, whatever the caller differentiates
            tensors = [t.detach().requires_grad_() if wanted and not t.requires_grad else t
                       for t, wanted in zip(tensors, self.requires_grad, strict=True)]
        out, weights = self._run(tensors)
        leaves = pytree.tree_leaves(out)
        outputs = [leaves[i] for i in self.out_tensors] + [weights[i] for i in self.written]
        # The op's schema is functional: an output that shares an input's memory is a copy
        # (compared by storage, which fake tensors have too, not by data pointer).
        aliases = torch._C._is_alias_of  # type: ignore[attr-defined]
        outputs = [o.clone() if any(aliases(o, t) for t in tensors) else o for o in outputs]
        if self.fixed is not None:
            for o, sizes in zip(outputs, self.fixed, strict=True):
                shape = [n if isinstance(n, int) else tensors[n[0]].shape[n[1]] for n in sizes]
                if list(o.shape) != shape:
                    raise RuntimeError(
                        f"ms_aten: opaque region {self.name} returned shape {list(o.shape)} "
                        f"where its capture's run gave {list(shape)}: its output size depends "
                        f"on values (the capture could only take it from one run); make the "
                        f"size depend on input sizes only, or capture it again for this input")
        return outputs


_STATE = threading.local()  # .running: inside a region's torch eager run; .record: partition's


def _autograd_kernel(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    region = nodes.entry(key, Region)
    if nodes.tracing(tensors):
        return nodes.below_autograd(_OPS[region.random], key, tensors)
    # As torch eager runs it: grad on, so torch autograd records the region for the VJP.
    with torch.enable_grad():
        return region(tensors)


def _backend_kernel(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    # Below autograd (inference): nothing is recorded, but a region that differentiates inside
    # (a gradient penalty) needs autograd, outside inference mode, on copies of its inputs.
    region = nodes.entry(key, Region)
    if not region.needs_grad:
        with torch.no_grad():
            return region(tensors)
    with torch.inference_mode(False), torch.enable_grad():
        outputs = region([t.clone() for t in tensors])
    return [o.detach() for o in outputs]


def _fake(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    region = nodes.entry(key, Region)
    if region.fixed is not None or region.needs_grad:
        return [torch.empty(shape, dtype=dtype) for shape, dtype in region.metas]
    with torch.no_grad():
        return [o.clone() for o in region(tensors)]


_LIBRARY, _OPS = nodes.define("ms_aten_opaque", "call", "call_random", _autograd_kernel,
                              _backend_kernel, _fake)


class _Probe(TorchDispatchMode):
    """Whether the ops under it draw random numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.random = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.random = True
        return func(*args, **(kwargs or {}))


@dataclass
class Recording:
    """What partition.py's one eager run of the model saw: each region site's outputs (shapes
    and dtypes, per call in order), whether it drew random numbers or differentiated inside,
    and the buffers it wrote."""

    outputs: dict[str, list[Returned]] = field(default_factory=dict)
    random: set[str] = field(default_factory=set)
    needs_grad: set[str] = field(default_factory=set)
    written: dict[str, set[str]] = field(default_factory=dict)  # buffers written, by name
    writes_input: set[str] = field(default_factory=set)
    seen: dict[str, int] = field(default_factory=dict)  # calls traced so far, per site


@dataclass(frozen=True)
class Returned:
    """What one real call of a region returned: its structure and its tensors' shapes."""

    spec: pytree.TreeSpec
    leaves: tuple[Meta | type, ...]  # a tensor's shape and dtype, else the leaf's type
    inputs: tuple[tuple[int, ...], ...]  # the shapes of the tensors among its arguments

    @staticmethod
    def of(out: Any, args: Any) -> Returned:
        leaves, spec = pytree.tree_flatten(out)
        return Returned(spec, tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor)
                                    else type(t) for t in leaves),
                        tuple(tuple(t.shape) for t in pytree.tree_leaves(args)
                              if isinstance(t, torch.Tensor)))


@contextlib.contextmanager
def recording(record: Recording) -> Iterator[None]:
    """Marked functions called in this block (an eager run) note what they return."""
    with nodes.setting(_STATE, "record", record):
        yield


@contextlib.contextmanager
def counting_grad() -> Iterator[list[int]]:
    """How often the code in this block differentiates (torch.autograd.grad or backward) or
    registers a tensor hook (which torch refuses on a tensor computed without grad): a region
    that does needs autograd wherever it runs."""
    calls = [0]
    grad, backward = torch.autograd.grad, torch.autograd.backward
    register_hook = torch.Tensor.register_hook

    def counted(original):
        @functools.wraps(original)
        def call(*args, **kwargs):
            calls[0] += 1
            return original(*args, **kwargs)
        return call

    torch.autograd.grad, torch.autograd.backward = counted(grad), counted(backward)
    torch.Tensor.register_hook = counted(register_hook)  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        torch.autograd.grad, torch.autograd.backward = grad, backward
        torch.Tensor.register_hook = register_hook  # type: ignore[method-assign]


def versions(module: torch.nn.Module | None, args: Any) -> tuple[dict[str, int], list[int]]:
    """The version counters of a module's buffers (by name) and of the tensors in `args`."""
    buffers = {} if module is None else {n: b._version for n, b in module.named_buffers()}
    return buffers, [t._version for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)]


def note(record: Recording, site: str, out: Any, rng_state: torch.Tensor, grads: int,
         module: torch.nn.Module | None, args: Any,
         before: tuple[dict[str, int], list[int]]) -> None:
    """One eager call of a region site, ended: what it returned, whether it drew random
    numbers (torch's RNG state moved since `rng_state`), differentiated (`grads` calls), or
    wrote its module's buffers or its arguments (their versions moved since `before`)."""
    record.outputs.setdefault(site, []).append(Returned.of(out, args))
    buffers, inputs = versions(module, args)
    record.written.setdefault(site, set()).update(
        n for n, v in buffers.items() if before[0].get(n, v) != v)
    if inputs != before[1]:
        record.writes_input.add(site)
    if not torch.equal(rng_state, torch.random.get_rng_state()):
        record.random.add(site)
    if grads:
        record.needs_grad.add(site)


def _record_call(site: str, record: Recording, module: torch.nn.Module | None, args: Any,
                 call: Callable[[], Any]) -> Any:
    state, before = torch.random.get_rng_state(), versions(module, args)
    with counting_grad() as grads:
        out = call()
    note(record, site, out, state, grads[0], module, args, before)
    return out


def _parameters(module: torch.nn.Module | None) -> set[str]:
    return set() if module is None else {n for n, _ in module.named_parameters()}


def _weights(module: torch.nn.Module | None) -> list[tuple[str, torch.Tensor, bool]]:
    if module is None:
        return []
    return [*((n, p, p.requires_grad) for n, p in module.named_parameters()),
            *((n, b, False) for n, b in module.named_buffers())]


def call_region(site: str, name: str, reason: str, function: Callable,
                module: torch.nn.Module | None, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """While torch.export traces: the region called as one node (its outputs as the code
    returns them); checked first by a run on the capture's fake tensors, out of the graph."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    positions = tuple(i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor))
    for leaf in leaves:
        if isinstance(leaf, torch.nn.Module):
            raise CaptureError(f"ms_aten: opaque region {name} takes the module "
                               f"{type(leaf).__name__} as an argument: its weights would be "
                               f"torch's, not the Cell's Parameters; mark a method of the "
                               f"module instead")
    weights = _weights(module)
    tensors = [w for _, w, _ in weights] + [leaves[i] for i in positions]
    region = Region(name, reason, function, module, tuple(n for n, _, _ in weights),
                    tuple(t for _, _, t in weights) + tuple(
                        leaves[i].requires_grad and leaves[i].is_floating_point()
                        for i in positions), spec,
                    tuple(None if i in positions else leaf for i, leaf in enumerate(leaves)),
                    positions)
    record = getattr(_STATE, "record", None)
    out = _probe(region, tensors)
    if out is None:  # the fake run failed: a real run's shapes
        calls = record.outputs.get(site) if isinstance(record, Recording) else None
        index = record.seen.get(site, 0) if isinstance(record, Recording) else 0
        if not calls or index >= len(calls):
            raise _Unshaped(f"opaque region {name}: tracing cannot run it on fake tensors, "
                            f"and no eager call gave its output shapes yet")
        assert isinstance(record, Recording)
        record.seen[site] = index + 1
        returned = calls[index]
        _check_outputs(region, returned.spec, returned.leaves)
        if site in record.writes_input:
            raise CaptureError(_WRITES_INPUT.format(region.name))
        written = record.written.get(site, set())
        if written & _parameters(module):
            raise CaptureError(_WRITES_PARAMETER.format(region.name, min(written)))
        region.written = tuple(i for i, n in enumerate(region.weight_names) if n in written)
        metas = [m for m in returned.leaves if isinstance(m, tuple)]
        region.fixed = [_sizes(shape, returned.inputs, tensors, len(weights))
                        for shape, _ in metas] + [
            tuple((i, d) for d in range(tensors[i].dim()))
            for i in region.written]
        region.metas = [(tuple(n if isinstance(n, int) else tensors[n[0]].shape[n[1]]
                               for n in sizes), dtype)
                        for sizes, (_, dtype) in zip(region.fixed, metas + [
                            ((), tensors[i].dtype) for i in region.written], strict=True)]
        region.random = site in record.random
        region.needs_grad = site in record.needs_grad
    key = nodes.register(region)
    outputs = _OPS[region.random](key, tensors)
    for i in region.written:  # the buffer's update, as the captured graph keeps it
        weights[i][1].copy_(outputs[len(outputs) - len(region.written) + region.written.index(i)])
    results = outputs[:len(outputs) - len(region.written)]
    assert region.out_spec is not None
    leaves_out: list[Any] = [None] * region.out_spec.num_leaves
    for position, tensor in zip(region.out_tensors, results, strict=True):
        leaves_out[position] = tensor
    return pytree.tree_unflatten(leaves_out, region.out_spec)


def _sizes(shape: tuple[int, ...], recorded: tuple[tuple[int, ...], ...],
           tensors: list[torch.Tensor], n_weights: int) -> tuple[int | tuple[int, int], ...]:
    """An output's sizes from a real run: a size equal to an argument's size that the capture
    keeps dynamic (a batch, a sequence length) is taken as that size, the rest as numbers; the
    node checks them at every call."""
    dynamic = [(j, d, n) for j, sizes in enumerate(recorded) for d, n in enumerate(sizes)
               if not isinstance(tensors[n_weights + j].shape[d], int)]
    return tuple(next(((n_weights + j, d) for j, d, n in dynamic if n == size), size)
                 for size in shape)


_WRITES_INPUT = ("ms_aten: opaque region {} writes its input in place; the program passes "
                 "values between its nodes, so the caller would not see the write: return the "
                 "new value instead")
_WRITES_PARAMETER = ("ms_aten: opaque region {} writes its parameter {} in place; a program's "
                     "Parameters change only by the optimizer")


class _Unshaped(Exception):  # noqa: N818
    """A region whose fake run failed, before any real run gave its shapes: the capture fails,
    and export.py's fallback records an eager call (partition.py) and captures again."""


def _probe(region: Region, tensors: list[torch.Tensor]) -> Any:
    """The region run once on (copies of) the capture's fake tensors, kept out of the graph:
    its output structure, random draws, in-place writes; refused by name where a node cannot
    keep it. None where the fake run fails (a size or a branch from values)."""
    copies = [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]
    versions = [t._version for t in copies]
    fake_mode = torch._guards.detect_fake_mode(tensors)
    shape_env = getattr(fake_mode, "shape_env", None)
    probe = _Probe()
    # The trace's record of module calls, which a failing run would leave unbalanced
    # (torch.fx pops it only on success) and a successful one would count.
    tracer = getattr(get_proxy_mode(), "tracer", None)
    stack, calls = getattr(tracer, "module_stack", None), getattr(tracer, "num_calls", None)
    saved = dict(stack or {}), dict(calls or {})
    try:
        with disable_proxy_modes_tracing(), torch.enable_grad(), probe, counting_grad() as grads, \
                shape_env.ignore_fresh_unbacked_symbols() if shape_env is not None \
                else contextlib.nullcontext():
            out = region._run(copies)[0]
    except CaptureError:
        raise
    except Exception:  # noqa: BLE001  (data-dependent: shapes from a real run instead)
        return None
    finally:
        for kept, before in ((stack, saved[0]), (calls, saved[1])):
            if kept is not None:
                kept.clear()
                kept.update(before)
    region.random, region.needs_grad = probe.random, bool(grads[0])
    n = len(region.weight_names)
    changed = [i for i, (t, v) in enumerate(zip(copies, versions, strict=True)) if t._version != v]
    for i in changed:
        if i >= n:
            raise CaptureError(_WRITES_INPUT.format(region.name))
        if region.weight_names[i] in _parameters(region.module):
            raise CaptureError(_WRITES_PARAMETER.format(region.name, region.weight_names[i]))
    region.written = tuple(changed)
    leaves, spec = pytree.tree_flatten(out)
    region.metas = [(tuple(t.shape), t.dtype) for t in leaves if isinstance(t, torch.Tensor)]
    region.metas += [(tuple(copies[i].shape), copies[i].dtype) for i in changed]
    _check_outputs(region, spec, tuple(leaf if isinstance(leaf, torch.Tensor) else type(leaf)
                                       for leaf in leaves))
    return out


def _check_outputs(region: Region, spec: pytree.TreeSpec, leaves: tuple[Any, ...]) -> None:
    """The region's output structure (`leaves`: its tensors, or the others' types), or a
    CaptureError naming what it returns that is neither a tensor nor None."""
    region.out_spec = spec
    bad = [leaf.__name__ for leaf in leaves if isinstance(leaf, type) and leaf is not type(None)]
    if bad:
        raise CaptureError(f"ms_aten: opaque region {region.name} returns a {bad[0]}, which the "
                           f"program cannot pass on (it runs before the rest, which would see "
                           f"the capture's value): return tensors")
    region.out_tensors = tuple(i for i, leaf in enumerate(leaves) if not isinstance(leaf, type))
    if not region.out_tensors:
        raise CaptureError(f"ms_aten: opaque region {region.name} returns no tensor")


def running() -> bool:
    """Whether a region's torch eager run is under way in this thread."""
    return getattr(_STATE, "running", False)


def capturing_marked() -> bool:
    """Whether a marked function called now is traced by a capture (not in a region's run)."""
    return getattr(_STATE, "capturing", False) and not getattr(_STATE, "running", False)


@contextlib.contextmanager
def marking() -> Iterator[None]:
    """torch.export in this block makes each call of a marked function one node."""
    with nodes.setting(_STATE, "capturing", True):
        yield


def opaque(function: Callable) -> Callable:
    """Marks a function (or a module's method) to run as one opaque torch call inside an
    ms_aten program: torch eager forward, torch autograd backward (second order included),
    named in an OpaqueWarning at capture. Called outside a capture it is the function itself.
    A method's module weights are passed in, so their gradients reach the Cell's Parameters."""
    name = getattr(function, "__qualname__", repr(function))
    site = f"marked:{function.__module__}.{name}"

    @functools.wraps(function)
    def marked(*args: Any, **kwargs: Any) -> Any:
        record = getattr(_STATE, "record", None)
        if not capturing_marked():
            if isinstance(record, Recording) and not getattr(_STATE, "running", False):
                module = args[0] if args and isinstance(args[0], torch.nn.Module) else None
                return _record_call(site, record, module, (args[1:] if module else args, kwargs),
                                    lambda: function(*args, **kwargs))
            return function(*args, **kwargs)
        if args and isinstance(args[0], torch.nn.Module):  # a method: its module's weights
            module, rest = args[0], args[1:]
            return call_region(site, name, "marked with ms_aten.opaque",
                               functools.partial(function, module), module, rest, kwargs)
        return call_region(site, name, "marked with ms_aten.opaque", function, None, args,
                           kwargs)

    return marked


@contextlib.contextmanager
def submodules_opaque(root: torch.nn.Module, root_name: str, reasons: Mapping[str, str],
                      prefix: str = "") -> Iterator[None]:
    """torch.export in this block calls each submodule named in `reasons` (torch's dotted
    path under `root`, "" the root) as one node, its reason the one torch.export gave;
    `prefix`: root's own path in the recorded model. The node runs the module's `__call__`, so
    its own hooks (forward, forward pre-, backward) fire in the region's run as in torch's."""
    patched = []
    for path, reason in reasons.items():
        module = root.get_submodule(path)
        label = f"{root_name}.{path} ({type(module).__name__})" if path else \
            f"{root_name} (its whole forward)"
        site = f"module:{prefix}{path}".rstrip(".")
        # nn.Module.__call__ calls the instance's `_call_impl`, which is torch's with hooks: an
        # instance attribute of that name intercepts the call; a class that replaces __call__
        # (its hooks refused by hooks.py) has its forward intercepted instead.
        hooked = type(module).__call__ is torch.nn.Module.__call__
        attribute = "_call_impl" if hooked else "forward"
        original = module.__dict__.get(attribute)
        call = functools.partial(type(module)._call_impl, module) if hooked else module.forward

        def region_call(*args, _call=call, _label=label, _reason=reason,
                        _module=module, _site=site, **kwargs):
            if running():
                return _call(*args, **kwargs)
            return call_region(_site, _label, _reason, _call, _module, args, kwargs)

        if not hooked:  # torch.export reads the root's forward signature
            functools.update_wrapper(region_call, call)
        module.__dict__[attribute] = region_call
        patched.append((module, attribute, original))
    try:
        yield
    finally:
        for module, attribute, original in patched:
            if original is None:
                module.__dict__.pop(attribute, None)
            else:
                module.__dict__[attribute] = original


def is_opaque_node(target: Any) -> bool:
    return target in _OPS.values()


def regions_in(gm: torch.fx.GraphModule) -> list[Region]:
    """The regions a graph calls, each once, in order."""
    found: dict[str, Region] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and is_opaque_node(node.target):
            region = nodes.entry(node.args[0], Region)
            found.setdefault(region.name, region)
    return list(found.values())


def warn(gm: torch.fx.GraphModule, stacklevel: int) -> None:
    """An OpaqueWarning per region of a captured graph."""
    for region in regions_in(gm):
        warnings.warn(f"ms_aten: {region.name} runs as an opaque torch call (torch eager "
                      f"forward, torch autograd backward, Python at every call): "
                      f"{region.reason}", OpaqueWarning, stacklevel=stacklevel)
