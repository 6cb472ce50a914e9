"""compile=True: a captured graph compiled ahead of time by AOTInductor, run as one op.

A program interprets its graph op by op (lowering/program.py); a compiled one has a single node,
`ms_aten::compiled(key, inputs)` (csrc/program/compiled.h), whose kernel runs shared objects
that torch's own compiler generated for the whole graph, fused loops and all. Everything around
it stays as for any program: MindSpore's Parameters are its weights, MindSpore's buffers its
outputs (one copy each), the buffers it updates are written back after it, and its backward is
the autograd node the op records.

- Inference (a module captured in eval mode): the graph as it is, compiled once
  (`torch._inductor.aot_compile`).
- Training (train mode, or `compile={"training": True}`): the joint forward-backward graph traced
  with make_fx and split by AOTAutograd's min-cut partitioner (what torch.compile does), each
  half compiled, the forward in a second process meanwhile (aot_build.py); the forward's saved
  tensors go to the backward in the op's autograd node.
- Weights and buffers are inputs of the compiled code, never constants in it: MindSpore trains
  them and a checkpoint loads them.
- Compiled libraries are cached on disk under a key of the graph, its inputs' shapes and dtypes,
  its custom autograd.Functions' code and everything it reaches (a Function that reads what
  cannot be keyed is not compiled: capture/autograd_functions.py's identities), what it
  differentiates, torch's version, the CPU's vector ISA and the thread count the code is
  generated for (ms_aten's: its kernels run on ms_aten's launch thread, in ATen's one OpenMP
  team). A second Cell of the same model compiles nothing. An entry is checked whole before it
  is loaded, and a damaged one compiled again (cache.py); the ISA is remembered in the
  cache, so that loading needs no C++ compiler.
- Buffers the graph updates: an inference graph writes them in place, inside the compiled code
  (a KV cache's new rows and nothing else: `copy_` of the new value into the buffer, which
  Inductor turns back into the in-place scatter); the op is then `compiled.writes`, which
  declares them written. A training graph returns their new values, which the program copies
  into the buffers (BatchNorm's running statistics).
- Dynamic shapes (a capture with dynamic_shapes): the inference library keeps the symbolic
  sizes; the training route is static only.
- Opaque torch calls (capture/opaque.py): the inference code calls each one's op through
  AOTInductor's proxy executor, by the key the graph names (its entry lives as long as the
  program: nodes.keep_keys). A training graph with one is compiled in pieces (pieces.py: the
  joint trace cannot differentiate a region's Python): each piece of captured ops between
  regions is a training graph of its own, forward and backward, one ms_aten::compiled node, and
  the region nodes stay between them, so the program's backward runs the pieces' compiled
  backwards and each region's torch autograd in turn. Its Compiled names the pieces' keys
  joined by "+" (a program with regions is never stored: stored/store.py). A second-order
  gradient is refused by the compiled pieces' backward, as for any compiled program.
- Anything it cannot compile runs interpreted, with a CompileWarning giving the reason.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import operator
import os
import platform
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, OutputKind

from ...native import library
from ...native.threads import get_num_threads
from ..base import Compiled
from ..capture import autograd_functions, nodes, opaque
from . import aot_build, cache, pieces
from .derivatives import differentiated, without_autograd

LOG = logging.getLogger("ms_aten")
# A compile that takes longer than this is logged as a warning (an info line otherwise).
LONG_COMPILE_S = 30.0
# The directory compiled libraries are cached in, unless compile={"cache_dir": ...} says.
CACHE_ENV = "MS_ATEN_CACHE_DIR"
# Bumped when the layout of a cached model changes.
_FORMAT = "4"
_OPTION_KEYS = frozenset({"training", "cache_dir"})


class CompileWarning(UserWarning):
    """compile=True ran a graph interpreted: AOTInductor could not compile it."""


class CompileCacheWarning(UserWarning):
    """A compiled model's cache entry was damaged (a partial copy, a changed file): it was
    removed and the model compiled again."""


class _NotCompiled(Exception):
    """Why a graph stays interpreted."""


@dataclass(frozen=True)
class CompileOptions:
    """What compile= asks for: `training` compiles the backward too (None: when the module is in
    train mode); `cache_dir`: where compiled libraries live (None: $MS_ATEN_CACHE_DIR, else
    ~/.cache/ms_aten/compiled)."""

    training: bool | None = None
    cache_dir: str | None = None

    @staticmethod
    def of(value: bool | Mapping[str, Any] | None) -> CompileOptions | None:
        """compile='s value: False / None compile nothing, True the defaults, a dict options."""
        if value is None or value is False:
            return None
        if value is True:
            return CompileOptions()
        if not isinstance(value, Mapping):
            raise TypeError(f"compile= takes True, False or a dict of options, got {value!r}")
        unknown = set(value) - _OPTION_KEYS
        if unknown:
            raise TypeError(f"compile= got unknown options {sorted(unknown)}; it takes "
                            f"{sorted(_OPTION_KEYS)}")
        training = value.get("training")
        if training is not None and not isinstance(training, bool):
            raise TypeError(f"compile={{'training': ...}} takes a bool, got {training!r}")
        cache_dir = value.get("cache_dir")
        return CompileOptions(training, None if cache_dir is None else os.fspath(cache_dir))

    def directory(self) -> Path:
        if self.cache_dir is not None:
            return Path(self.cache_dir)
        return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "ms_aten" / "compiled")


def compile_exported(exported: ExportedProgram, name: str, options: CompileOptions,
                     training: bool | None, differentiable: Callable[[InputSpec], bool]
                     ) -> Compiled | None:
    """Compiles `exported` (or loads it from the cache) and rewrites its graph in place into one
    ms_aten.compiled node; `training`: with its backward (None: when some input is
    differentiable); `differentiable`: whether the backward differentiates a weight (floating
    user inputs always are). Returns None, the graph untouched and a CompileWarning given, when
    AOTInductor cannot compile it."""
    try:
        graph = _Graph(exported, differentiable)
        if training is None:
            training = any(graph.differentiates)
        if training:
            _check_derivatives(graph)
        if training and graph.regions:  # Python in the middle of a joint graph
            return _compile_around_regions(graph, name, options)
        compiled = _load_or_compile(graph, name, options, training)
    except Exception as error:  # noqa: BLE001  (Inductor raises many kinds; the reason is kept)
        _warn_interpreted(name, error)
        return None
    # The regions the compiled code calls live as long as the program (capture/nodes.py).
    nodes.keep_keys(exported.graph_module, [n.args[0] for n in exported.graph_module.graph.nodes
                                            if n.op == "call_function"
                                            and opaque.is_opaque_node(n.target)])
    graph.replace_with(compiled.key, in_place=graph.in_place(training))
    return compiled


def _warn_interpreted(name: str, error: Exception) -> None:
    first_line = next(iter(str(error).strip().splitlines()), "")
    reason = first_line if isinstance(error, _NotCompiled) else \
        f"{type(error).__name__}: {first_line}"
    warnings.warn(f"ms_aten: {name}: compile=True runs it interpreted: {reason}",
                  CompileWarning, stacklevel=5)


class _Graph:
    """The captured graph as a flat function of its tensor inputs (weights, buffers,
    constants, user inputs, as torch.export lists them) returning its flat outputs."""

    def __init__(self, exported: ExportedProgram, differentiable: Callable[[InputSpec], bool]
                 ) -> None:
        self.exported = exported
        gm = exported.graph_module
        # Opaque torch calls: the inference code calls their op through AOTInductor's proxy
        # executor (the dispatcher, then the region's Python).
        self.regions = opaque.regions_in(gm)
        self.placeholders: list[torch.fx.Node] = []
        self.differentiates: list[bool] = []
        specs = exported.graph_signature.input_specs
        for node, spec in zip([n for n in gm.graph.nodes if n.op == "placeholder"], specs,
                              strict=True):
            value = node.meta.get("val")
            if not isinstance(value, torch.Tensor):
                continue  # a constant of the capture (use_cache=False): the graph ignores it
            self.differentiates.append(differentiated(value, spec, differentiable))
            self.placeholders.append(node)
        # Captured with dynamic_shapes: AOTInductor keeps the sizes torch.export made symbolic.
        self.dynamic = any(not isinstance(n, int) for p in self.placeholders
                           for n in p.meta["val"].shape)
        self.output = gm.graph.output_node()
        self.outputs = _output_values(gm.graph)
        # The buffers the graph updates: (their input's index here, their output's index),
        # in input order.
        index = {node.name: i for i, node in enumerate(self.placeholders)}
        buffer_input = {spec.target: spec.arg.name for spec in specs
                        if spec.kind == InputKind.BUFFER}
        self.writes = sorted(
            (index[buffer_input[spec.target]], k)
            for k, spec in enumerate(exported.graph_signature.output_specs)
            if spec.kind == OutputKind.BUFFER_MUTATION)
        if not all(isinstance(v, torch.fx.Node) and isinstance(v.meta.get("val"), torch.Tensor)
                   for v in self.outputs):
            raise _NotCompiled("the graph returns values other than tensors")
        self.random = any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                          and torch.Tag.nondeterministic_seeded in n.target.tags
                          for n in gm.graph.nodes)

    def module(self, in_place: bool = False) -> torch.fx.GraphModule:
        """A copy of the graph taking only its tensor inputs; `in_place`: it writes the buffers
        it updates (`copy_` into them) and returns the user outputs only."""
        gm = self.exported.graph_module
        graph = torch.fx.Graph()
        values: dict[torch.fx.Node, torch.fx.Node] = {}
        output = graph.graph_copy(gm.graph, values)
        if in_place:
            assert isinstance(output, (tuple, list))  # an exported graph returns a flat tuple
            written = {k: values[self.placeholders[i]] for i, k in self.writes}
            for k, value in enumerate(output):
                if k in written:
                    graph.call_function(torch.ops.aten.copy_.default, (written[k], value))
            output = tuple(v for k, v in enumerate(output) if k not in written)
        graph.output(output)
        keep = {values[p] for p in self.placeholders}
        for node in [n for n in graph.nodes if n.op == "placeholder" and n not in keep]:
            graph.erase_node(node)
        return torch.fx.GraphModule(gm, graph)

    def in_place(self, training: bool) -> bool:
        """Whether the compiled code writes the buffers the graph updates: for inference."""
        return bool(self.writes) and not training

    def examples(self) -> list[torch.Tensor]:
        """Zero tensors shaped as the inputs, contiguous as MindSpore's buffers are (calloc'd
        memory: nothing is touched); for a dynamic capture, its fake tensors, whose symbolic
        sizes AOTInductor keeps."""
        if self.dynamic:
            return [p.meta["val"] for p in self.placeholders]
        return [_zeros(p.meta["val"]) for p in self.placeholders]

    def key(self, training: bool, threads: int, isa: str) -> str:
        return _key(self.module(), self.placeholders, self.differentiates, training, threads, isa,
                    str(self.exported.range_constraints) if self.dynamic else "",
                    self.exported.graph_module)

    def replace_with(self, key: str, in_place: bool) -> None:
        """The graph becomes one ms_aten.compiled call over its tensor inputs; `in_place`: the
        call writes the buffers the graph updates (compiled.writes), and the graph gives each
        buffer itself as its new value (lowering/inplace.py)."""
        graph = self.exported.graph_module.graph
        written = {k: self.placeholders[i] for i, k in self.writes} if in_place else {}
        with graph.inserting_before(self.output):
            if in_place:
                call = graph.call_function(torch.ops.ms_aten.compiled.writes, (
                    key, [p for p in self.placeholders if p not in written.values()],
                    list(written.values())))
            else:
                op = torch.ops.ms_aten.compiled.random if self.random else \
                    torch.ops.ms_aten.compiled.default
                call = graph.call_function(op, (key, list(self.placeholders)))
            returned = [v for k, v in enumerate(self.outputs) if k not in written]
            call.meta["val"] = [v.meta["val"] for v in returned]
            items = iter(range(len(returned)))
            results = []
            for k, value in enumerate(self.outputs):
                if k in written:
                    results.append(written[k])
                    continue
                item = graph.call_function(operator.getitem, (call, next(items)))
                item.meta["val"] = value.meta["val"]
                results.append(item)
        self.output.args = (tuple(results),)
        # Every other node goes: eliminate_dead_code would keep the random ones (impure).
        kept = {call, *results}
        for node in reversed(list(graph.nodes)):
            if node.op in ("call_function", "get_attr") and node not in kept:
                graph.erase_node(node)
        self.exported.graph_module.recompile()


def _key(module: torch.fx.GraphModule, placeholders: list[torch.fx.Node],
         differentiates: list[bool], training: bool, threads: int, isa: str, constraints: str,
         functions: torch.fx.GraphModule) -> str:
    """A compiled graph's cache key: its code, inputs, what it differentiates, the custom
    autograd.Functions of `functions` and what the code is generated for."""
    inputs = [(tuple(p.meta["val"].shape), str(p.meta["val"].dtype), d)
              for p, d in zip(placeholders, differentiates, strict=True)]
    text = json.dumps([_FORMAT, torch.__version__, isa, threads, training,
                       [(str(shape), dtype, d) for shape, dtype, d in inputs], constraints,
                       _code(module), autograd_functions.identities(functions)])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class _Piece:
    """One piece of a training graph around its opaque torch calls (pieces.py), compiled as a
    graph of its own: what _load_or_compile reads of a _Graph."""

    dynamic = False  # the training route is static
    writes: list[tuple[int, int]] = []  # the buffers' new values are outputs like the others

    def __init__(self, piece: pieces.Piece, root: torch.fx.GraphModule,
                 differentiates: list[bool]) -> None:
        self.gm = piece.module(root)
        self.placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        self.outputs = _output_values(self.gm.graph)
        self.differentiates = differentiates
        self.random = any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                          and torch.Tag.nondeterministic_seeded in n.target.tags
                          for n in self.gm.graph.nodes)

    def module(self, in_place: bool = False) -> torch.fx.GraphModule:
        return self.gm

    def in_place(self, training: bool) -> bool:
        return False

    def examples(self) -> list[torch.Tensor]:
        return [_zeros(p.meta["val"]) for p in self.placeholders]

    def key(self, training: bool, threads: int, isa: str) -> str:
        return _key(self.gm, self.placeholders, self.differentiates, training, threads, isa, "",
                    self.gm)


def _compile_around_regions(graph: _Graph, name: str, options: CompileOptions) -> Compiled:
    """A training graph with opaque torch calls: each piece of captured ops between them
    compiled as a graph of its own (its forward and backward), the graph rewritten into the
    pieces' ms_aten.compiled nodes and the region nodes between them (pieces.py). A piece
    through which no gradient flows although its inputs have one (it computes integers from
    them) stays interpreted; it computes no gradient."""
    gm = graph.exported.graph_module
    steps = pieces.split(gm.graph, lambda n: n.op == "call_function"
                         and opaque.is_opaque_node(n.target))
    # Which values carry a gradient: the differentiated inputs, what is computed from them,
    # and a region's floating results (a region that differentiates inside gives its results
    # a gradient of their own).
    reached = {p for p, d in zip(graph.placeholders, graph.differentiates, strict=True) if d}
    regions = {node for step in steps for node in step.regions}
    for node in pieces.nodes_of(steps):
        if (node in regions or any(a in reached for a in node.all_input_nodes)) and \
                _floating_tensor(node):
            reached.add(node)
    todo = [step.piece for step in steps if step.piece.outputs]
    for piece in todo:
        for node in (*piece.inputs, *piece.outputs):
            if not isinstance(node.meta.get("val"), torch.Tensor):
                raise _NotCompiled(f"{node.name}, passed between a compiled piece and an opaque "
                                   f"torch call, is not a tensor")
    calls: dict[int, tuple[str, bool]] = {}
    built: list[Compiled] = []
    for k, piece in enumerate(todo):
        differentiates = [a in reached for a in piece.inputs]
        unit = _Piece(piece, gm, differentiates)
        training = any(differentiates)
        if training and not any(_has_grad(unit)):
            continue  # no gradient through it: interpreted (see above)
        compiled = _load_or_compile(unit, f"{name} (piece {k + 1} of {len(todo)} around its "
                                    f"opaque torch calls)", options, training)
        calls[id(piece)] = (compiled.key, unit.random)
        built.append(compiled)
    if not built:
        around = "no gradient flows through what is captured around it (integers)" if todo \
            else "nothing captured around it is left to compile"
        raise _NotCompiled(f"{graph.regions[0].name} runs as an opaque torch call, and {around}")
    _replace_around(gm, steps, calls)
    return Compiled("+".join(c.key for c in built), options.directory(), True,
                    all(c.cached for c in built), sum(c.seconds for c in built))


def _floating_tensor(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _replace_around(gm: torch.fx.GraphModule, steps: list[pieces.Step],
                    calls: Mapping[int, tuple[str, bool]]) -> None:
    """The graph rewritten in place: each compiled piece one ms_aten.compiled call over its
    inputs, the pieces left interpreted and the region nodes copied as they are, in order."""
    graph = gm.graph
    output = graph.output_node()
    values: dict[torch.fx.Node, torch.fx.Node] = {}

    def value(node: torch.fx.Node) -> torch.fx.Node:
        return values.get(node, node)  # the graph's inputs stay

    with graph.inserting_before(output):
        for step in steps:
            piece = step.piece
            if id(piece) in calls:
                key, random = calls[id(piece)]
                op = torch.ops.ms_aten.compiled.random if random else \
                    torch.ops.ms_aten.compiled.default
                call = graph.call_function(op, (key, [value(a) for a in piece.inputs]))
                call.meta["val"] = [o.meta["val"] for o in piece.outputs]
                for j, node in enumerate(piece.outputs):
                    values[node] = graph.call_function(operator.getitem, (call, j))
                    values[node].meta["val"] = node.meta["val"]
            else:
                for node in piece.nodes:
                    values[node] = graph.node_copy(node, value)
            for node in step.regions:
                values[node] = graph.node_copy(node, value)
    output.args = torch.fx.map_arg(output.args, value)
    old = set(pieces.nodes_of(steps))
    for node in reversed(list(graph.nodes)):
        if node in old:
            graph.erase_node(node)
    gm.recompile()


def _code(gm: torch.fx.GraphModule) -> str:
    """The graph's code with its shapes and dtypes, without the comments naming where each node
    came from: those name a file made per trace (`<eval_with_key>.49`), another in each capture
    of one model."""
    return "\n".join(line for line in gm.print_readable(print_output=False).splitlines()
                     if not line.lstrip().startswith("#"))


def _output_values(graph: torch.fx.Graph) -> list[Any]:
    """What a graph returns, flat."""
    values = graph.output_node().args[0]
    assert isinstance(values, (tuple, list))
    return list(values)


def _zeros(value: torch.Tensor) -> torch.Tensor:
    return torch.zeros(tuple(value.shape), dtype=value.dtype)


# The threads of start_vector_isa_probe(), joined by _vector_isa().
_isa_probes: list[threading.Thread] = []


def start_vector_isa_probe(options: CompileOptions) -> None:
    """Starts Inductor's check of the CPU's vector instruction sets (ISAs) in the background, one
    thread per candidate, so that it runs beside the capture that comes first and the candidates
    beside each other. Inductor checks each ISA the CPU lists with a g++ build and a dlopen in a
    child process, one after another, the first time a process compiles (its answer is then
    cached in the process, the builds in Inductor's cache): 6.5 s in line on this 2-core VM with
    a cold cache, 3.6 s in threads. _vector_isa(), which every compile asks first, joins them.
    Nothing starts where the cache remembers the answer (cache.remembered_isa)."""
    if _isa_probes or platform.machine() not in ("x86_64", "AMD64") or \
            cache.remembered_isa(options.directory()) is not None:
        return
    # What a probe imports, imported here: a failed probe is cached as "no such ISA" for the
    # process, and imports in three threads beside the capture's own are a risk it need not take.
    import torch.utils._filelock  # noqa: F401
    from torch._inductor import codecache, cpp_builder, cpu_vec_isa  # noqa: F401

    flags = cpu_vec_isa.x86_isa_checker()
    for isa in cpu_vec_isa.supported_vec_isa_list:
        if all(flag in flags for flag in str(isa).split()):
            # bool(isa) builds and loads the probe; its answer is cached on the ISA object,
            # where valid_vec_isa_list() finds it.
            thread = threading.Thread(target=bool, args=(isa,), daemon=True,
                                      name=f"ms_aten ISA probe {isa}")
            thread.start()
            _isa_probes.append(thread)


def _vector_isa(root: Path) -> str:
    """The ISA cache keys name: the one the cache under `root` remembers, else Inductor's
    answer (remembered from now on)."""
    remembered = cache.remembered_isa(root)
    if remembered is not None:
        return remembered
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    for thread in _isa_probes:
        thread.join()
    isa = pick_vec_isa()
    if isa:  # not without a working compiler, which the next process may have
        cache.remember_isa(root, str(isa))
    return str(isa)


def _threads() -> int:
    """The OpenMP team size ms_aten's kernels run with (csrc/launch/launch_thread.h)."""
    return get_num_threads() or torch.get_num_threads()


def _check_derivatives(graph: _Graph) -> None:
    """_NotCompiled if the backward would pass through an op without an autograd kernel, where
    AOTAutograd's trace would keep the zeros torch's fallback passes back (derivatives.py)."""
    missing = without_autograd(graph.exported.graph_module.graph, [
        p for p, d in zip(graph.placeholders, graph.differentiates, strict=True) if d])
    if missing:
        raise _NotCompiled(f"torch registers no autograd kernel for {', '.join(missing)}, "
                           f"which the gradient passes through, so no backward is compiled")


def _load_or_compile(graph: _Graph | _Piece, name: str, options: CompileOptions,
                     training: bool) -> Compiled:
    if graph.dynamic and training:
        raise _NotCompiled("dynamic shapes are compiled for inference only (a compiled "
                           "backward would take the forward's sizes as inputs, which ms_aten "
                           "does not pass yet): capture in eval mode, or without "
                           "dynamic_shapes to compile one program per shape")
    threads = _threads()
    root = options.directory()
    key = graph.key(training, threads, _vector_isa(root))
    directory = root / key
    start = time.perf_counter()
    spec = _cached(directory, name)
    cached = spec is not None
    if spec is None:
        cache.clean(root)
        # Built beside the cache entry and renamed into place: a cache entry is whole or absent.
        staging = directory.with_name(f"{key}.{os.getpid()}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            lines = [f"name {quote(name, safe='')}"]
            # Compiling applies custom autograd Functions: their forward and backward are
            # compiled.
            with torch._inductor.config.patch({"cpp.threads": threads}), \
                    autograd_functions.inline():
                lines += (_compile_training(graph, staging) if training
                          else _compile_inference(graph, staging))
            cache.seal(staging, lines)
        except BaseException:  # a failed compile, a Ctrl-C: nothing is left in the cache
            shutil.rmtree(staging, ignore_errors=True)
            raise
        try:
            staging.rename(directory)
        except OSError:  # another process cached it first
            shutil.rmtree(staging, ignore_errors=True)
        spec = cache.read(directory)
    seconds = time.perf_counter() - start
    _register(key, spec, directory)
    if not cached:
        level = logging.WARNING if seconds > LONG_COMPILE_S else logging.INFO
        LOG.log(level, "ms_aten: compiled %s (%s) in %.1f s, cached in %s", name,
                "forward and backward" if training else "inference", seconds, directory)
    return Compiled(key, directory, training, cached, seconds)


def compile_target_of(options: CompileOptions) -> dict[str, Any]:
    """What compiled code is generated for beyond its graph (the thread count, the CPU's vector
    instruction sets), for the key of a stored capture that holds a compiled model."""
    from torch._inductor import cpu_vec_isa

    return {"threads": _threads(), "machine": platform.machine(),
            "cpu flags": " ".join(sorted(cpu_vec_isa.x86_isa_checker())),
            "cache": str(options.directory())}


def register_cached(compiled: Compiled, name: str) -> bool:
    """Hands the library a compiled model its cache holds (a stored capture's, programs/
    stored/), checked whole first; False where the entry is gone or damaged (removed, with a
    CompileCacheWarning naming it)."""
    spec = _cached(compiled.path, name)
    if spec is None:
        return False
    _register(compiled.key, spec, compiled.path)
    return True


def _cached(directory: Path, name: str) -> str | None:
    """The spec of the cache entry in `directory`, or None: none there, or a damaged one,
    removed with a CompileCacheWarning naming it (it is compiled again)."""
    if not directory.exists():
        return None
    try:
        return cache.read(directory)
    except cache.Damaged as damage:
        warnings.warn(f"ms_aten: {name}: the compile cache's entry {directory} is damaged "
                      f"({damage}); it is compiled again", CompileCacheWarning, stacklevel=6)
    cache.discard(directory)
    return None


def _compile_inference(graph: _Graph | _Piece, directory: Path) -> list[str]:
    in_place = graph.in_place(training=False)
    with torch.no_grad():
        so = aot_build.aot_compile(graph.module(in_place), graph.examples(), directory,
                                   "inference")
    writes = [f"writes {','.join(str(i) for i, _ in graph.writes)}"] if in_place else []
    return [f"inference {so}", *writes]


def _has_grad(graph: _Graph | _Piece) -> list[bool]:
    """Whether each output of the graph has a gradient from its differentiated inputs (a run
    on fake tensors)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode, torch.enable_grad():
        fakes = [mode.from_tensor(x).requires_grad_(d)
                 for x, d in zip(graph.examples(), graph.differentiates, strict=True)]
        return [bool(out.requires_grad) for out in graph.module()(*fakes)]


def _compile_training(graph: _Graph | _Piece, directory: Path) -> list[str]:
    """The joint graph of the outputs and the gradients of the differentiated inputs, split into
    a forward and a backward by the min-cut partitioner, each compiled."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = graph.module()
    differentiates = graph.differentiates
    # The joint graph's example inputs; the differentiated ones become leaves below.
    primals = graph.examples()
    has_grad = _has_grad(graph)
    n_outputs = len(has_grad)
    if not any(has_grad):
        raise _NotCompiled("no output depends on a differentiated input")

    def joint(primals: list[torch.Tensor], tangents: list[torch.Tensor]) -> tuple:
        outputs = gm(*primals)
        wrt = [p for p, d in zip(primals, differentiates, strict=True) if d]
        grads = iter(torch.autograd.grad([o for o, g in zip(outputs, has_grad, strict=True) if g],
                                         wrt, tangents, allow_unused=True))
        return (*outputs, *[next(grads) if d else None for d in differentiates])

    for x, d in zip(primals, differentiates, strict=True):
        x.requires_grad_(d)
    tangents = [_zeros(v.meta["val"]) for v, g in zip(graph.outputs, has_grad, strict=True) if g]
    with torch.enable_grad():
        joint_gm = make_fx(joint, tracing_mode="fake")(primals, tangents)
    forward, backward = min_cut_rematerialization_partition(
        joint_gm, [*primals, *tangents], num_fwd_outputs=n_outputs)
    forward_names = [n.name for n in _output_values(forward.graph)]
    saved = {name: j for j, name in enumerate(forward_names[n_outputs:])}
    backward_inputs = []
    backward_examples = []
    for node in backward.graph.nodes:
        if node.op != "placeholder":
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            raise _NotCompiled(f"the backward takes {node.name}, which is not a tensor")
        if node.name.startswith("tangents_"):
            backward_inputs.append(f"t{int(node.name.removeprefix('tangents_')) - 1}")
            backward_examples.append(_zeros(value))
        else:
            backward_inputs.append(f"s{saved[node.name]}")
            backward_examples.append(torch.zeros_like(torch.empty_strided(
                tuple(value.shape), tuple(value.stride()), dtype=value.dtype)))
    # The backward returns a gradient per input, None for those it does not differentiate; the
    # compiled one returns the others.
    grads = _output_values(backward.graph)
    gradients = [i for i, g in enumerate(grads) if g is not None]
    backward.graph.output_node().args = (tuple(g for g in grads if g is not None),)
    backward.recompile()
    with torch.no_grad():
        built = aot_build.aot_compile_all({
            "forward": (forward, [p.detach() for p in primals]),
            "backward": (backward, backward_examples)}, directory)
    return [f"forward {built['forward']} {n_outputs}", f"backward {built['backward']}",
            f"differentiates {','.join(str(i) for i, d in enumerate(differentiates) if d)}",
            f"tangents {','.join(str(k) for k, g in enumerate(has_grad) if g)}",
            f"backward_inputs {','.join(backward_inputs)}",
            f"gradients {','.join(map(str, gradients))}"]


def _register(key: str, spec: str, directory: Path) -> None:
    """Hands a model to the library, its libraries' names made paths in `directory`."""
    lines = []
    for line in spec.splitlines():
        kind, *rest = line.split(" ")
        if kind in ("inference", "forward", "backward"):
            rest[0] = quote(str(directory / rest[0]), safe="/")
        lines.append(" ".join([kind, *rest]))
    lib = library.load()
    lib.ms_aten_compiled_register.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                              ctypes.c_size_t]
    error = ctypes.create_string_buffer(4096)
    if lib.ms_aten_compiled_register(key.encode(), "\n".join(lines).encode(), error,
                                     len(error)):
        raise RuntimeError(error.value.decode())
