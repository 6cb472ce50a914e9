"""ms_aten.module: a torch.nn.Module as a MindSpore Cell whose weights are MindSpore Parameters."""
from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from mindspore import PYNATIVE_MODE, Parameter, ParameterTuple, Tensor, get_context
from torch.export import ExportedProgram

from ..native import library
from ..native.convert import to_ms, to_torch
from ..ops.primitive import graph_mode
from .base import Signature
from .capture.export import DynamicShapes, example_like, export
from .capture.guards import Change, Guards
from .capture.opaque import regions_in
from .capture.structure import Inputs, Node, output_nodes
from .compile.compiled import (
    CompileOptions,
    compile_exported,
    compile_target_of,
    start_vector_isa_probe,
)
from .lowering.program import Program, build
from .runtime.cell import ProgramCell, call
from .runtime.changes import ChangeCheck, TorchModuleChanged, Weights, after, follow
from .runtime.primitive import AtenFunction
from .runtime.verify import Verifier, calls_to_verify, verified_call
from .stored import key as stored_key
from .stored.store import Stored, captured

# Each submodule's mode (torch's `training`), in named_modules' order: the root's first.
Modes = tuple[bool, ...]
# What one capture of a module is made for: its modes, and torch.autocast's dtype or None.
Capture = tuple[Modes, torch.dtype | None]
# MindSpore's mixed-precision flags (Cell.to_float, amp O2/O3) -> the dtype of torch.autocast.
AUTOCAST_FLAGS = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": None}


class TorchModule(ProgramCell):
    """A torch module's forward as one ms_aten program (one kernel launch), with every torch
    parameter a MindSpore Parameter of the same name (`trainable_params()` go straight to a
    MindSpore optimizer) and every buffer a non-trainable Parameter.

    Each submodule runs in its own mode, as torch runs it. The Cell starts in the torch
    module's modes as they are at the call (`model.train(); model.backbone.eval()` keeps the
    backbone's BatchNorm statistics frozen); `set_train(False)` is torch's `model.eval()` for the
    whole tree, and `set_train(True)` gives back those modes (MindSpore's training wrappers call
    it: they never unfreeze what the user froze), or torch's `model.train()` for a module
    captured with its root in eval mode. Both are what the module's own `train()` / `eval()`
    give, overrides included (mmdet's `norm_eval`), run once at the call.
    `set_submodule_train(name, mode)` changes one subtree's train-mode mode later. Each mode
    tree is captured once. Buffers the graph updates (a KV cache, BatchNorm's running
    statistics in train mode) are written in place, into their Parameters
    (lowering/inplace.py).

    Called as the module is, by position or keyword (`cell(input_ids=x, attention_mask=m)`),
    with the inputs nested as at capture; the constants of the capture (use_cache=False) may
    be left out. Returns the module's outputs in their structure: a HuggingFace ModelOutput or
    a dict as a dict by field name (`out["logits"]`), tuples and lists as they nest, a lone
    tensor as a Tensor (ProgramCell).

    In either mode a forward that a backward follows keeps its autograd graph for it, which then
    runs one backward pass and no second forward; inference keeps nothing (csrc/program/saved.h):
    an eval-mode module differentiated (a fine-tuning without dropout, a saliency map) is not
    inference.

    Captured with `dynamic_shapes` (torch.export's argument), one program serves every size its
    ranges allow, and the Cell declares the dynamic sizes to MindSpore (`set_inputs` with None
    there), so GRAPH mode compiles it once too. `replace`: (pattern, replacement[,
    example_inputs]) tuples applied at every capture (capture/rewrite.py); `cell.program.replaced`
    counts the matches. `strict`: torch.export's argument; None tries non-strict, then strict.
    `compile`: True (or a dict of options) runs each capture as code AOTInductor compiled
    (compile/compiled.py); `cell.program.compiled` says what that took.

    Captures are cached on disk without the weights (programs/stored/, docs/capture_cache.md):
    a later process with the same model skips them; `capture_cache` says what the cache did
    for the latest one ("hit", "stored", or why not).
    """

    # Whether a forward that a backward follows keeps its autograd graph (AtenFunction).
    _record = True
    # The counts a subclass's _rewrite keeps (CausalLM's), stored with each capture.
    _stored_counts: tuple[str, ...] = ()

    def __init__(self, module: torch.nn.Module, args: tuple = (),
                 kwargs: Mapping[str, Any] | None = None, *,
                 dynamic_shapes: DynamicShapes = None, replace: Sequence = (),
                 strict: bool | None = None, compile: bool | Mapping[str, Any] = False,
                 verify: bool | int | None = None):
        super().__init__()
        self._compile = CompileOptions.of(compile)
        if self._compile is not None:
            start_vector_isa_probe(self._compile)  # beside the capture
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ms_aten.module expects a torch.nn.Module, "
                            f"got {type(module).__name__}")
        self._torch_module = module
        self._replace = replace
        self._strict = self._strict_asked = strict
        self._name = type(module).__name__
        self._take(Inputs.of(module.forward, args, kwargs, f"ms_aten.module({self._name})",
                             f"'{self._name}'", dynamic_shapes))
        weights = Weights.of(module)
        self._weight_names, self._trainable = weights.names, weights.trainable
        self._aliases, self._state_keys = weights.aliases, weights.state_keys
        # A Parameter copies the Tensor it is given: a Tensor over torch's memory, not a copy
        # of it, makes that the only copy (GPT-2 small's Cell is made 0.7 s sooner).
        self.weights = ParameterTuple(
            Parameter(to_ms(t, copy=False), name=name, requires_grad=name in self._trainable)
            for name, t in zip(weights.names, weights.tensors, strict=True))
        self._weight_shapes = [list(p.shape) for p in self.weights]
        self._functions: dict[Capture, tuple[AtenFunction, tuple[Node, ...]]] = {}
        self._opaque: dict[str, None] = {}  # names of the opaque regions, in order
        self._autocast: torch.dtype | None = None
        # Each submodule's mode in the Cell's train mode: as the tree is now when its root is in
        # train mode, else torch's model.train(); in eval mode, torch's model.eval(). Both as
        # the module's own train() / eval() make them (an override that keeps BatchNorm frozen).
        self._torch_submodules = dict(module.named_modules())
        after_train, self._eval_modes = _mode_trees(module)
        self._train_modes = {name: m.training if module.training else after_train[name]
                             for name, m in self._torch_submodules.items()}
        calls = calls_to_verify(verify)
        this = weakref.ref(self)  # the Verifier, kept by the primitives, must not keep the Cell

        def mode_tree() -> dict[str, bool]:
            cell = this()
            assert cell is not None, "a verified call of a freed Cell"
            return cell._mode_tree()

        def verified_all() -> None:
            # PYNATIVE calls construct from Python: from now on without the checks' ops. A
            # GRAPH-mode graph keeps those it was compiled with (they return at once).
            cell = this()
            if cell is not None and get_context("mode") == PYNATIVE_MODE:
                cell._verifying = False

        self._verifier = None if not calls else Verifier(
            module, self._name, self._weight_names, self._trainable, self._inputs, calls,
            mode_tree, verified_all)
        self._verifying = self._verifier is not None
        super().set_train(module.training)
        self._select(module.training)
        # What the capture took from the torch module besides its graph (changes.py).
        self._guards = Guards(module)
        # GRAPH mode's check of the torch module, before each launch (a CPU pyfunc op).
        self._change_check = ChangeCheck(self) if library.current_target() == "CPU" else None
        # Primitives a change replaced (by family) -> why: a graph still holding one refuses.
        self._retired: dict[int, str] = {}
        self._followed = False  # a GRAPH-mode call from Python just took the changes
        # The changes each capture made again took (runtime/changes.py), oldest first.
        self.recaptures: list[list[Change]] = []

    def _modes(self, training: bool) -> Modes:
        """Each submodule's mode (named_modules' order) for the Cell's mode `training`."""
        modes = self._train_modes if training else self._eval_modes
        return tuple(modes[name] for name in self._torch_submodules)

    def _mode_tree(self) -> dict[str, bool]:
        """Each submodule's mode (by name) in the Cell's current mode."""
        return dict(zip(self._torch_submodules, self._modes(self.training), strict=True))

    def _capture(self, key: Capture, example: tuple[tuple, dict[str, Any]]
                 ) -> tuple[Program, tuple[Node, ...]]:
        """The program for a tree of modes and an autocast dtype: those of its AtenFunction,
        whatever the Cell's are when a new input signature captures again. From the capture
        cache on disk when it holds it (stored/); `capture_cache` says what the cache did."""
        stored, self.capture_cache = captured(
            self._name, lambda: self._key_parts(key, example),
            lambda: self._capture_now(key, example))
        self._strict = stored.strict
        for name, count in stored.counts.items():
            setattr(self, name, count)
        return stored.program, stored.nodes

    def _key_parts(self, key: Capture, example: tuple[tuple, dict[str, Any]]
                   ) -> stored_key.Parts:
        """The parts of the capture cache's key for this capture (stored/key.py)."""
        modes, autocast = key
        compile_target = None if self._compile is None else \
            compile_target_of(self._compile)
        return stored_key.capture_parts(
            self._torch_module, cell=type(self), autocast=autocast,
            modes=dict(zip(self._torch_submodules, modes, strict=True)),
            args=example[0], kwargs=example[1],
            dynamic_shapes=self._inputs.torch_dynamic_shapes("forward"),
            options={"replace": self._replace, "strict": self._strict_asked,
                     "compile": self._compile, "record": self._record,
                     **self._cache_options()},
            compile_target=compile_target)

    def _cache_options(self) -> dict[str, Any]:
        """A subclass's options that change its captures, for the capture cache's key."""
        return {}

    def _capture_now(self, key: Capture, example: tuple[tuple, dict[str, Any]]) -> Stored:
        modes, autocast = key
        training = modes[0]  # the root's mode, the Cell's
        module = self._torch_module
        # The capture sees each submodule in its own mode (torch.export keeps each one's); the
        # torch module's own modes come back afterwards.
        before = {m: m.training for m in self._torch_submodules.values()}
        for m, mode in zip(self._torch_submodules.values(), modes, strict=True):
            m.training = mode
        inputs = self._inputs
        forward = module.__dict__.get("forward")
        if autocast is not None:
            # torch.export keeps an autocast entered inside forward (an outer one it drops).
            module.forward = _autocast(module.forward, autocast)
        try:
            # The strictness that captured the first time captures every later time.
            # A Cell that keeps no autograd graph (CausalLM) serves no gradient: a custom
            # autograd.Function's forward is all it needs (BLOOM's GELU).
            exported, self._strict = export(module, example[0], self._name,
                                            inputs.torch_dynamic_shapes("forward"),
                                            self._replace, example[1], self._strict,
                                            differentiable=self._record)
        finally:
            for m, mode in before.items():
                m.training = mode
            if forward is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = forward
        self._rewrite(exported)
        # The opaque torch calls of every capture, for repr (capture/opaque.py).
        self._opaque.update(dict.fromkeys(r.name for r in regions_in(exported.graph_module)))
        compiled = None
        if self._compile is not None:
            training = training if self._compile.training is None else self._compile.training
            compiled = compile_exported(
                exported, self._name, self._compile, training,
                lambda spec: self._aliases.get(spec.target or "", spec.target) in self._trainable)
        program = build(exported, self._name, self._weight_names, self._trainable,
                        self._aliases, dim_names=inputs.dim_names, input_names=inputs.names,
                        compiled=compiled)
        return Stored(program, output_nodes(exported.call_spec.out_spec), bool(self._strict),
                      {name: getattr(self, name) for name in self._stored_counts})

    def _rewrite(self, exported: ExportedProgram) -> None:
        """A subclass's changes to each capture's graph before it is compiled or built."""

    def _select(self, training: bool) -> None:
        key = self._modes(training), self._autocast
        if key not in self._functions:
            program, nodes = self._capture(key, (self._inputs.args, self._inputs.kwargs))
            self._functions[key] = (self._function_of(key, program), nodes)
        function, nodes = self._functions[key]
        self._use(function, nodes)
        if self._verifier is not None:
            self._verify_ops = self._verifier.forward_ops(function.program)

    def _function_of(self, key: Capture, program: Program) -> AtenFunction:
        """The primitive of a capture. It keeps its recapture, and a GRAPH-mode graph keeps the
        primitive until the Cell is freed: the Cell by a weak reference, or it would never be."""
        cell, name = weakref.ref(self), self._name

        def recapture(signature: Signature) -> Program:
            this = cell()
            if this is None:
                raise RuntimeError(f"ms_aten.module({name}): the Cell is gone, and "
                                   f"its primitive cannot capture new input shapes")
            return this._capture(key, this._inputs.example(list(example_like(signature))))[0]

        return AtenFunction(program, recapture, record=self._record,
                            verifier=self._verifier)

    def _capture_again(self, changes: list[Change], running: bool) -> None:
        """A Python value or submodule the forward may read changed (runtime/changes.py): the
        forward is captured again, for each input signature the primitive serves, over the same
        Parameters. New programs replace the old ones in the primitive (a graph MindSpore
        compiled around the Cell runs them from its next launch); a program that comes out the
        same (a value the forward never read) replaces nothing. New outputs need a new
        primitive: a Cell called from Python gets one (compiled again in GRAPH mode), a graph
        that is `running` cannot take it (TorchModuleChanged). The captures of the other modes
        and autocast dtypes are made again when selected."""
        key = self._modes(self.training), self._autocast
        function, _ = self._functions[key]
        first = function.program.signature
        program, nodes = self._capture(key, (self._inputs.args, self._inputs.kwargs))
        programs = {first: program} | {signature: self._capture(key, self._inputs.example(
            list(example_like(signature))))[0] for signature in function.programs
            if signature != first}
        # The other modes' and autocast dtypes' primitives are captured again when selected; a
        # graph still holding one refuses.
        for other, (dropped, _) in self._functions.items():
            if other != key:
                self._retired[int(dropped.family)] = (
                    f"ms_aten.module({self._name}): after {changes[0].describe()}, this graph "
                    f"holds the Cell's primitive of another train/eval mode or autocast dtype, "
                    f"captured before the change: compile the graph again")
                # MindSpore keys a compiled top-level Cell on its creation time: compile again.
                object.__setattr__(self, "_create_time", self.create_time + 1)
        self._functions = {key: (function, nodes)}
        self.recaptures.append(changes)
        if all((p.spec, p.vjp_spec) == (function.programs[s].spec, function.programs[s].vjp_spec)
               for s, p in programs.items()):
            return
        why = function.replace(programs) if nodes == self._nodes else "its outputs changed"
        if why is None:
            return
        if running:
            raise TorchModuleChanged(
                f"ms_aten.module({self._name}): after {changes[0].describe()}, the forward "
                f"captured again has other outputs ({why}), which the graph MindSpore compiled "
                f"around the Cell cannot take; call the Cell from Python, or compile the graph "
                f"again")
        self._retired[int(function.family)] = (
            f"ms_aten.module({self._name}): after {changes[0].describe()}, the forward "
            f"captured again has other outputs ({why}); the Cell called from Python runs it, "
            f"but a graph MindSpore compiled around the Cell before the change holds the old "
            f"program and cannot take it: compile that graph again (a new ms.jit function, "
            f"value_and_grad or Cell)")
        function = self._function_of(key, program)
        self._functions = {key: (function, nodes)}
        self._use(function, nodes)
        # MindSpore keys a compiled top-level Cell on its creation time: compile it again.
        object.__setattr__(self, "_create_time", self.create_time + 1)

    def _follow_tree(self, weights: Weights) -> None:
        """A submodule replaced (runtime/changes.py): its modes, by name, and the weights'
        names for the torch state dict."""
        module = self._torch_module
        self._torch_submodules = dict(module.named_modules())
        self._train_modes = {name: self._train_modes.get(name, m.training or not module.training)
                             for name, m in self._torch_submodules.items()}
        self._state_keys = weights.state_keys

    def _use(self, function: AtenFunction, nodes: tuple[Node, ...]) -> None:
        super()._use(function, nodes)
        # The primitive a graph compiled from now on holds, a constant of that graph, which its
        # ChangeCheck receives at each launch.
        self._check_token = Tensor(np.array([int(function.family)], np.int64))

    def set_train(self, mode: bool = True) -> TorchModule:
        """MindSpore's mode switch as torch's: False is `model.eval()`; True gives each
        submodule its train-mode mode (see TorchModule)."""
        super().set_train(mode)
        self._select(mode)
        return self

    def add_flags(self, **flags: Any) -> TorchModule:
        """MindSpore's mixed precision (`to_float`, amp O2 and O3, `build_train_network`) runs
        the program under torch.autocast of that dtype, as torch's own mixed precision: the
        Parameters stay float32 (master weights), each op runs in the dtype autocast gives it.
        To MindSpore the Cell is then float32, so that it casts neither the weights nor the
        inputs."""
        wanted = [AUTOCAST_FLAGS[k] for k, on in flags.items() if k in AUTOCAST_FLAGS and on]
        if not wanted or getattr(self, "_functions", None) is None:  # not amp, or in __init__
            return super().add_flags(**flags)
        super().add_flags(**{**{k: False for k in AUTOCAST_FLAGS}, "fp32": True})
        if wanted[0] != self._autocast:
            self._autocast = wanted[0]
            self._select(self.training)
        return self

    def set_submodule_train(self, name: str, mode: bool = True) -> TorchModule:
        """The train-mode mode of submodule `name` (torch's dotted name, as in
        `named_modules()`; "" is the root) and of every module under it, as torch's
        `model.get_submodule(name).train(mode)`: `cell.set_submodule_train("backbone", False)`
        freezes a backbone's BatchNorm statistics from the next train-mode call on. The Cell in
        eval mode stays in eval mode."""
        if name not in self._torch_submodules:
            raise KeyError(f"ms_aten.module({self._name}) has no submodule {name!r}; its "
                           f"submodules: {sorted(self._torch_submodules)[:20]}")
        prefix = f"{name}." if name else ""
        for other in self._torch_submodules:
            if other == name or other.startswith(prefix):
                self._train_modes[other] = mode
        return self.set_train(self.training)

    def extend_repr(self) -> str:
        # The submodules whose mode differs from their parent's.
        tree = dict(zip(self._torch_submodules, self._modes(self.training), strict=True))
        modes = ", ".join(f"{name}: {'train' if mode else 'eval'}" for name, mode in tree.items()
                          if name and mode != tree[name.rpartition(".")[0]])
        mode = "train" if self.training else "eval"
        regions = "".join(f"\nopaque torch call: {name}" for name in self._opaque)
        return (f"{super().extend_repr()}\nmode: {mode}{f' ({modes})' if modes else ''}"
                f"{regions}\n{self._torch_module!r}")

    def __call__(self, *args, **kwargs):
        # A call from Python (PYNATIVE, or a GRAPH-mode Cell called at the top): the torch
        # module's changes since the capture are applied first (changes.py).
        follow(self)
        if self._change_check is None or not graph_mode():
            return super().__call__(*args, **kwargs)
        # Where MindSpore compiles the Cell for this call (not _runs_directly), its graph checks
        # again in its ChangeCheck op, with no Python run in between: that op skips its check
        # while this flag is up.
        object.__setattr__(self, "_followed", True)
        try:
            return super().__call__(*args, **kwargs)
        finally:
            object.__setattr__(self, "_followed", False)

    def _runs_directly(self) -> bool:
        # A verified call's checks are ops of the graph it compiles (verify.py).
        return not self._verifying and super()._runs_directly()

    def construct(self, *args, **kwargs):
        inputs = after(self._change_check, self._check_token, self._leaves(args, kwargs))
        if self._verifying:
            keep, check = self._verify_ops
            return self._outputs(verified_call(self._function, keep, check, self.weights,
                                               inputs), kwargs)
        return self._outputs(call(self._function, self.weights, inputs), kwargs)

    def torch_state_dict(self) -> dict[str, torch.Tensor]:
        """The current weights as the torch module's state dict (same keys), so a model trained
        in MindSpore goes back with `module.load_state_dict(cell.torch_state_dict())`."""
        values = {name: to_torch(p.value())
                  for name, p in zip(self._weight_names, self.weights, strict=True)}
        return {key: values[name] for key, name in self._state_keys.items()}


def _mode_trees(module: torch.nn.Module) -> tuple[dict[str, bool], dict[str, bool]]:
    """Each submodule's mode (by name) after torch's `module.train()` and after `module.eval()`:
    the module's own methods run, overrides included (mmdet's `norm_eval` keeps BatchNorm in
    eval mode in train()). Every module's mode and every parameter's requires_grad (which such
    an override may set, freezing stages) are put back afterwards."""
    modules = dict(module.named_modules())
    modes = {m: m.training for m in modules.values()}
    requires_grad = {p: p.requires_grad for p in module.parameters()}
    try:
        module.train()
        after_train = {name: m.training for name, m in modules.items()}
        module.eval()
        return after_train, {name: m.training for name, m in modules.items()}
    finally:
        for m, mode in modes.items():
            m.training = mode
        for p, flag in requires_grad.items():
            p.requires_grad_(flag)


def _autocast(forward, dtype: torch.dtype):
    @functools.wraps(forward)  # torch.export reads the signature through __wrapped__
    def autocast_forward(*args, **kwargs):
        with torch.autocast("cpu", dtype=dtype):
            return forward(*args, **kwargs)
    return autocast_forward


def module(torch_module: torch.nn.Module, args: tuple = (),
           kwargs: Mapping[str, Any] | None = None, *, dynamic_shapes: DynamicShapes = None,
           replace: Sequence = (), strict: bool | None = None,
           compile: bool | Mapping[str, Any] = False,
           verify: bool | int | None = None) -> TorchModule:
    """`torch_module` as a MindSpore Cell running its forward in one kernel launch; see
    TorchModule. `args` and `kwargs` are an example call, as torch.export takes them: tensors
    anywhere in them (tuples, lists, dicts, any pytree node) are the Cell's inputs, the rest
    (use_cache=False, None, numbers) constants of the capture. dynamic_shapes: torch.export's
    argument, mirroring the inputs (by the forward's argument names: `{"input_ids": {0:
    Dim("batch"), 1: Dim("seq", max=512)}}`, or one spec per argument in order; a `*xs`
    forward's as one per element). strict: torch.export's argument (True: TorchDynamo traces;
    False: Python runs the forward); None, the default, tries non-strict, then strict.
    compile: True runs the forward (and in train mode the backward) as code AOTInductor
    compiled ahead of time, cached on disk; a dict gives options, {"training": bool,
    "cache_dir": path}. A graph it cannot compile runs interpreted, with a CompileWarning.
    verify: True runs torch eager beside the first 3 calls (an int: that many) and their
    backward passes, and raises ms_aten.VerificationError naming the first output or gradient
    that differs (runtime/verify.py, docs/verify.md); None reads the environment variable
    MS_ATEN_VERIFY."""
    return TorchModule(torch_module, args, kwargs, dynamic_shapes=dynamic_shapes,
                       replace=replace, strict=strict, compile=compile, verify=verify)
