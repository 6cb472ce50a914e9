"""torch's autograd hooks on a captured module: each runs as torch runs it, inside an opaque
region (opaque.py), or is refused by name.

MindSpore computes a program's gradients, so a hook in the captured graph would never run.
What holds a hook runs as torch eager instead, called through its module's `__call__`, so its
module hooks fire as torch's, and its backward is torch autograd over what that run recorded:

- A module's backward hooks (`register_full_backward_hook`, `register_full_backward_pre_hook`,
  the old `register_backward_hook`): the module is a region. A global one
  (`register_module_full_backward_hook`) acts on every module: the whole forward is one.
- `Tensor.register_hook` called while the forward is traced (on an intermediate, an input, a
  weight): torch.export fails with `TensorHook`, and the partition (partition.py) makes the
  smallest submodule that calls it a region, or the whole forward where the root's own code
  does; inside a region's run the hook is torch's.

Refused by name: a parameter's own gradient hook and `register_post_accumulate_grad_hook` (a
program's weights are new tensors at every call, its gradients MindSpore's outputs, so a hook on
the Parameter object would never see them), and a backward hook on a module whose class
replaces `nn.Module.__call__` (its region could not call it through torch's hook machinery).
"""
from __future__ import annotations

import os
import traceback

import torch

from ..base import CaptureError


class TensorHook(Exception):  # noqa: N818
    """`Tensor.register_hook` was called while torch.export traced: the part that calls it
    runs as an opaque torch call (partition.py finds it)."""


def caller() -> str:
    """'at file:line' of the innermost frame outside torch and ms_aten (the user's code that
    registers the hook), or 'in forward' where none is (TorchDynamo's own node runs it)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    frame = next((f for f in reversed(traceback.extract_stack())
                  if f"{os.sep}torch{os.sep}" not in f.filename
                  and not f.filename.startswith(("<", package))), None)
    return "in forward" if frame is None else f"at {frame.filename}:{frame.lineno}"


# What a strict capture's refusal of a hook advises.
STRICT_ADVICE = "; capture with strict=False or None"


def strict_refusal(name: str, where: str = "in forward") -> CaptureError:
    return CaptureError(
        f"ms_aten: {name}: Tensor.register_hook() {where} runs only in torch's autograd, as an "
        f"opaque torch call, which a strict capture cannot make", STRICT_ADVICE, "opaque")


def tensor_hook_error(method: str, name: str, strict: bool) -> Exception:
    """What `Tensor.<method>` raises while a capture (`name`) traces, outside a region."""
    where = caller()
    if method != "register_hook":
        return CaptureError(
            f"ms_aten: {name}: Tensor.{method}() {where} would never run: a program's "
            f"weights are new tensors at every call, and MindSpore accumulates the gradients")
    if strict:
        return strict_refusal(name, where)
    return TensorHook(f"Tensor.register_hook() {where}: its hook runs in torch's autograd")


def _has_backward_hooks(module: torch.nn.Module) -> bool:
    return bool(module._backward_hooks or module._backward_pre_hooks)


def refuse_parameter_hooks(module: torch.nn.Module, name: str) -> None:
    """CaptureError naming a gradient hook on one of `module`'s parameters."""
    for path, p in module.named_parameters():
        if p._backward_hooks or getattr(p, "_post_accumulate_grad_hooks", None):
            raise CaptureError(
                f"ms_aten: {name}: parameter '{path}' has a gradient hook (register_hook or "
                f"register_post_accumulate_grad_hook), which would never run: a program's weights "
                f"are new tensors at every call and MindSpore computes their gradients; register "
                f"the hook on the tensor inside forward (it then runs as torch's), or apply its "
                f"change to the gradients MindSpore returns")


def regions(module: torch.nn.Module, name: str) -> dict[str, str]:
    """The submodules of `module` that run as opaque regions for their backward hooks (torch's
    dotted paths, "" the whole forward), and why; CaptureError naming a hook that cannot be
    kept (the module's docstring)."""
    refuse_parameter_hooks(module, name)
    found: dict[str, str] = {}
    if torch.nn.modules.module._global_backward_hooks \
            or torch.nn.modules.module._global_backward_pre_hooks:
        found[""] = ("a global module backward hook (register_module_full_backward_hook) runs "
                     "in torch's autograd")
    for path, m in module.named_modules():
        if not _has_backward_hooks(m):
            continue
        if type(m).__call__ is not torch.nn.Module.__call__:
            raise CaptureError(
                f"ms_aten: {name}: module '{path or type(m).__name__}' has a backward hook, and "
                f"its class {type(m).__qualname__} replaces nn.Module.__call__, through which an "
                f"opaque region would run it; remove the hook or the __call__")
        if not any(path.startswith(f"{outer}.") or not outer for outer in found):
            found[path] = "a module backward hook (register_full_backward_hook) runs in torch's " \
                "autograd"
    return found
