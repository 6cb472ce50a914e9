"""torch's autograd constructs inside a captured forward: each kept with torch's meaning, or
refused by name; never a gradient that silently differs from torch's (docs/porting.md, "Autograd
inside forward").

- Grad-mode regions: torch.export keeps a `no_grad` / `set_grad_enabled(False)` block as a
  `wrap_with_set_grad_enabled` node, which `run_decompositions` inlines and forgets. Before it
  runs, `keep_grad_regions` detaches every input of each such region: nothing computed inside
  then carries a gradient, as in torch (an `enable_grad` block inside one is a region of its
  own at the top level, where grad is on). `inference_mode`, which torch.export drops
  altogether, is traced as `no_grad`, and `inference_mode(False)` as `enable_grad` (the same
  gradients; torch's further limits on inference tensors are not enforced).
- Custom `torch.autograd.Function`s: autograd_functions.py.
- Hooks: a tensor hook registered in forward and a module's backward hooks run as torch's,
  in opaque regions; a parameter's gradient hook is refused by name (hooks.py).

torch is patched while a capture is under way in any thread, and the patches act in the
capturing thread alone.
"""
from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

import torch

from ..base import CaptureError
from . import autograd_functions, hooks, no_grad_writes, nodes, opaque

_WRAP_GRAD = torch.ops.higher_order.wrap_with_set_grad_enabled


def keep_grad_regions(gm: torch.fx.GraphModule, name: str, root: bool = True) -> None:
    """Detaches the inputs of every grad-disabled region of a torch.export graph (and of the
    regions in its submodules); an input the region writes in place, or one written through
    `.detach()` (in the root graph), keeps torch's gradient (no_grad_writes.py)."""
    if root:
        no_grad_writes.straighten_detached_writes(gm, name)
    regions = [node for node in gm.graph.nodes
               if node.op == "call_function" and node.target is _WRAP_GRAD and not node.args[0]]
    for node in regions:
        body = getattr(gm, node.args[1].target)
        graph = body.graph
        writes = no_grad_writes.written(body)
        for index, placeholder in enumerate([n for n in graph.nodes if n.op == "placeholder"]):
            users = list(placeholder.users)
            with graph.inserting_after(placeholder):
                detached = graph.call_function(torch.ops.aten.detach.default, (placeholder,))
            for user in users:
                user.replace_input_with(placeholder, detached)
            if index in writes:
                no_grad_writes.straighten(gm, node, body, index, detached, writes[index], name)
        body.recompile()
    if regions:
        gm.recompile()
    for child in gm.children():
        if isinstance(child, torch.fx.GraphModule):
            keep_grad_regions(child, name, root=False)


def refuse_traced_functions(gm: torch.fx.GraphModule, name: str) -> None:
    """CaptureError for a custom autograd.Function in a strict (TorchDynamo) capture, which
    inlines its forward and loses its backward; non-strict keeps it (autograd_functions.py)."""
    for node in gm.graph.nodes:
        if any(entry[0] == "autograd.function" for entry in node.meta.get("source_fn_stack") or ()):
            frames = [line.strip() for line in (node.meta.get("stack_trace") or "").splitlines()
                      if line.strip().startswith("File ")]
            where = frames[-1] if frames else node.name
            found = re.match(r'File "(.*)", line (\d+)', where)
            cls = found and autograd_functions.defined_at(found[1], int(found[2]))
            raise CaptureError(
                f"ms_aten: {name}: a strict capture inlines a custom torch.autograd.Function's "
                f"forward and loses its backward ({f'{cls}, ' if cls else ''}{where}); "
                f"capture with strict=False, which keeps it")
    for child in gm.children():
        if isinstance(child, torch.fx.GraphModule):
            refuse_traced_functions(child, name)


def _tensor_hook(method: str):
    original = _TENSOR_HOOKS[method]

    def register(tensor: torch.Tensor, hook: Any, *args: Any, **kwargs: Any):
        name = _capture_name()
        if name is None:  # another thread's hook, during a capture in this one
            return original(tensor, hook, *args, **kwargs)
        if torch.compiler.is_dynamo_compiling():  # (before the thread-local it cannot trace)
            raise hooks.tensor_hook_error(method, name, strict=True)
        if opaque.running():  # in a region's torch eager run: torch's hook (hooks.py)
            return original(tensor, hook, *args, **kwargs)
        raise hooks.tensor_hook_error(method, name, strict=False)
    return register


# torch's own methods, put back after the captures under way (patched only while one traces;
# the patched ones act in the capturing thread alone: _CAPTURE.name is set there).
_INFERENCE_MODE = torch.autograd.grad_mode.inference_mode
_INFERENCE_ENTER_EXIT = (_INFERENCE_MODE.__enter__, _INFERENCE_MODE.__exit__)
_TENSOR_HOOKS = {name: getattr(torch.Tensor, name)
                 for name in ("register_hook", "register_post_accumulate_grad_hook")}
_CAPTURE = threading.local()
_PATCHES = threading.Lock()
_UNDER_WAY = 0  # captures tracing, in every thread
_NAMES: set[str] = set()  # of the captures under way


def _capture_name() -> str | None:
    """The name of the capture this thread is in, None in a thread that is not capturing.
    TorchDynamo (a strict capture) cannot trace a thread-local: while it traces, the capture is
    the one under way (two strict captures at once share their refusals' names)."""
    if torch.compiler.is_dynamo_compiling():
        return next(iter(_NAMES), "a strict capture")
    return getattr(_CAPTURE, "name", None)


def _enter_as_no_grad(self) -> None:
    if _capture_name() is None:  # another thread: torch's inference mode
        self._ms_aten_grad = None
        _INFERENCE_ENTER_EXIT[0](self)
        return
    # torch's inference_mode(mode) sets grad mode to `not mode`, as no_grad / enable_grad.
    self._ms_aten_grad = torch.set_grad_enabled(not self.mode)


def _exit_as_no_grad(self, *exc: Any) -> None:
    if self._ms_aten_grad is None:
        _INFERENCE_ENTER_EXIT[1](self, *exc)
    else:
        self._ms_aten_grad.__exit__(*exc)


def _inference_mode_function(mode: Any = True) -> Any:
    """torch.inference_mode as TorchDynamo can trace it (it drops the real one silently)."""
    if _capture_name() is None:
        return _INFERENCE_MODE(mode)
    if callable(mode):  # @torch.inference_mode on a function
        return torch.no_grad()(mode)
    return torch.no_grad() if mode else torch.enable_grad()


def _patch() -> None:
    # Non-strict runs the class's methods (however the module named it); strict, what the
    # name torch.inference_mode holds.
    _INFERENCE_MODE.__enter__ = _enter_as_no_grad  # type: ignore[method-assign]
    _INFERENCE_MODE.__exit__ = _exit_as_no_grad  # type: ignore[method-assign]
    torch.inference_mode = _inference_mode_function  # type: ignore[assignment,misc]
    for method in _TENSOR_HOOKS:
        setattr(torch.Tensor, method, _tensor_hook(method))


def _unpatch() -> None:
    _INFERENCE_MODE.__enter__, _INFERENCE_MODE.__exit__ = (  # type: ignore[method-assign]
        _INFERENCE_ENTER_EXIT)
    torch.inference_mode = _INFERENCE_MODE  # type: ignore[misc]
    for method, original in _TENSOR_HOOKS.items():
        setattr(torch.Tensor, method, original)


@contextlib.contextmanager
def _patched(name: str) -> Iterator[None]:
    """torch patched while a capture is under way in some thread; `name`'s in this one."""
    global _UNDER_WAY
    with _PATCHES:
        if not _UNDER_WAY:
            _patch()
        _UNDER_WAY += 1
        _NAMES.add(name)
    try:
        with nodes.setting(_CAPTURE, "name", name):
            yield
    finally:
        with _PATCHES:
            _NAMES.discard(name)
            _UNDER_WAY -= 1
            if not _UNDER_WAY:
                _unpatch()


@contextlib.contextmanager
def capturing(module: torch.nn.Module, name: str, strict: bool) -> Iterator[None]:
    """torch.export of `module` in this block keeps its autograd constructs (the module's
    docstring); a grad-enabled trace, as MindSpore differentiates the program."""
    hooks.refuse_parameter_hooks(module, name)
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.enable_grad())
        stack.enter_context(_patched(name))
        if not strict:  # TorchDynamo inlines Functions itself: refuse_traced_functions
            stack.enter_context(autograd_functions.as_nodes())
        yield
