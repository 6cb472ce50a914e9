"""When torch.export refuses a module: the smallest submodules it refuses run as opaque torch
calls (opaque.py), and everything around them is captured.

One eager call of the model records each submodule's arguments (forward pre-hooks) and what
each region site returns (the shapes a fake run cannot give); the model's buffers and torch's
RNG state are restored afterwards. Then, top-down from the root: a child that torch.export
captures alone stays captured; one it refuses is searched the same way, and is a region itself
when none of its children is refused, or when it is still refused with theirs opaque (its own
code is what torch.export refuses). The root's own forward code is the last resort: the whole
forward is one region.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..base import CaptureError
from . import opaque

# torch.export of a submodule with some submodules opaque: (module, args, kwargs, reasons by
# path under it, what the eager run recorded, its own path and ".", or "") -> None, or raises
# torch's error.
Exporter = Callable[[torch.nn.Module, tuple, dict[str, Any], Mapping[str, str],
                     opaque.Recording, str], Any]


@dataclass
class _Calls:
    """Each submodule's first call: its arguments, by path."""

    args: dict[str, tuple[tuple, dict[str, Any]]] = field(default_factory=dict)


@contextlib.contextmanager
def _restored(module: torch.nn.Module) -> Iterator[None]:
    """The module's buffers and torch's RNG state as they were before the block."""
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    state = torch.random.get_rng_state()
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
        torch.random.set_rng_state(state)


def record(module: torch.nn.Module, args: tuple, kwargs: Mapping[str, Any]
           ) -> tuple[_Calls, opaque.Recording]:
    """One eager call: each submodule's first arguments, and what each region site returns
    (every submodule, by path, and every function marked with ms_aten.opaque)."""
    calls = _Calls()
    recorded = opaque.Recording()
    handles = []
    with opaque.counting_grad() as grads:
        for path, sub in module.named_modules():
            site = f"module:{path}"
            started: list[tuple[torch.Tensor, int, Any]] = []

            def pre(m, a, kw, _path=path, _started=started):
                calls.args.setdefault(_path, (a, kw))
                _started.append((torch.random.get_rng_state(), grads[0],
                                 opaque.versions(m, (a, kw))))

            def post(m, a, kw, out, _site=site, _started=started):
                state, count, before = _started.pop()
                opaque.note(recorded, _site, out, state, grads[0] - count, m, (a, kw), before)

            # First among its pre-hooks: the arguments the module's __call__ takes (a region
            # runs it, its hooks included).
            handles.append(sub.register_forward_pre_hook(pre, prepend=True, with_kwargs=True))
            handles.append(sub.register_forward_hook(post, with_kwargs=True))
        try:
            with _restored(module), opaque.recording(recorded), torch.enable_grad():
                module(*args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()
    return calls, recorded


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".strip()


def smallest(module: torch.nn.Module, args: tuple, kwargs: Mapping[str, Any],
             reason: str | None, export: Exporter, fixed: Mapping[str, str] | None = None
             ) -> tuple[dict[str, str], opaque.Recording]:
    """The smallest parts of `module` torch.export refuses (it refused the whole for `reason`;
    None: not tried with `fixed`): submodule paths ("" the root's own forward) and torch.export's
    reason for each, `fixed` (paths that are regions whatever torch.export says: a backward
    hook's, hooks.py) among them where called; and what the eager run recorded, for the capture
    that follows."""
    calls, recorded = record(module, args, kwargs)
    fixed = {path: why for path, why in (fixed or {}).items() if path in calls.args}
    if "" in fixed:
        return {"": fixed[""]}, recorded

    def under(path: str) -> dict[str, str]:
        prefix = f"{path}." if path else ""
        return {p: r for p, r in fixed.items() if p.startswith(prefix)}

    def exports(path: str, regions: Mapping[str, str]) -> str | None:
        """None if the submodule at `path` exports with `regions` (paths under it) opaque,
        else torch's reason."""
        sub = module.get_submodule(path)
        sub_args, sub_kwargs = calls.args[path]
        prefix = f"{path}." if path else ""
        inner = {p[len(prefix):]: r for p, r in regions.items()}
        try:
            export(sub, sub_args, dict(sub_kwargs), inner, recorded, prefix)
        except CaptureError:
            raise  # refused by name (a region's input write): no smaller part helps
        except Exception as error:  # noqa: BLE001  (the reason is what is kept)
            return first_line(error)
        return None

    def search(path: str, why: str) -> dict[str, str]:
        sub = module.get_submodule(path)
        prefix = f"{path}." if path else ""
        found: dict[str, str] = {}
        for name, _ in sub.named_children():
            child = prefix + name
            if child not in calls.args:  # never called: nothing to capture
                continue
            if child in fixed:
                found[child] = fixed[child]
                continue
            refused = exports(child, under(child))
            found.update(under(child) if refused is None else search(child, refused))
        if found and exports(path, found) is None:
            return found
        return {path: why}

    if reason is None:
        reason = exports("", fixed)
        if reason is None:
            return fixed, recorded
    return search("", reason), recorded
