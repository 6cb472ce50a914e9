"""Capturing a torch module or function with torch.export, for the program route
(lowering/program.py), with the user's subgraph replacements applied (rewrite.py)."""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import torch
from torch._dynamo.exc import UserError, UserErrorType
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    UnsupportedOperatorException,
)
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
from torch.utils import _pytree as pytree

from ...ops.schema import missing_meta_kernel
from ..base import CaptureError, Signature
from . import autograd_constructs, hooks, no_grad_writes, nodes, opaque, partition, rewrite

# The FutureWarning every torch.export of torch 2.13 prints from its own code.
_TORCH_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"

# What torch.export raises for a branch or a size that depends on tensor values.
_DATA_DEPENDENT = (GuardOnDataDependentSymNode, DataDependentOutputException,
                   DynamicOutputShapeException)

# A range torch.export refused: what its guards say ("... satisfy the generated guard ..."),
# and ms_aten's advice where torch suggests no fix.
_GUARD = "satisfy the generated guard"
_RANGE_ADVICE = ("\n(dynamic_shapes allows sizes the model's code does not take: narrow the "
                "range until every guard above holds; a value a guard excludes at its low end, "
                "by starting past it)")

# torch.export's dynamic_shapes: one spec per input (a dict {dim: Dim}, a tuple of per-dim
# Dims, or None; nested as the input nests), or a dict of them by argument name.
DynamicShapes = dict[str, Any] | tuple[Any, ...] | list[Any] | None


class FunctionModule(torch.nn.Module):
    """torch.export captures modules; this one calls a plain function. Its keyword inputs come
    last among forward's positional ones, named by `keywords`: torch 2.13's non-strict export
    fails on dynamic_shapes for a `**kwargs` forward ("Must provide a tree_name")."""

    def __init__(self, fn: Callable, keywords: Sequence[str] = ()) -> None:
        super().__init__()
        self.fn = fn
        self.keywords = tuple(keywords)

    def forward(self, *args):
        n = len(args) - len(self.keywords)
        return self.fn(*args[:n], **dict(zip(self.keywords, args[n:], strict=True)))


def export(module: torch.nn.Module, example_inputs: tuple, name: str,
           dynamic_shapes: DynamicShapes = None, replace: Sequence = (),
           kwargs: Mapping[str, Any] | None = None,
           strict: bool | None = None, *,
           differentiable: bool = True) -> tuple[ExportedProgram, bool | None]:
    """torch.export of `module`, functionalized, with high-level ATen ops kept (an empty
    decomposition table keeps linear, layer_norm, scaled_dot_product_attention: their CPU
    kernels are faster than their decompositions); CaptureError carries torch's reason. Each
    (pattern, replacement) of `replace` is then applied in turn (rewrite.py), its pattern and
    replacement captured the same way. `kwargs`: the keyword inputs, as torch.export takes
    them.

    strict: torch.export's argument (True traces with TorchDynamo, False with Python); None
    tries non-strict, then strict, then runs the smallest parts torch.export refuses as opaque
    torch calls (partition.py, opaque.py; an OpaqueWarning names each). Returns the program and
    the strictness that captured it (None for that last route), which a later capture of the
    same module (another shape, the other mode) reuses.
    `differentiable=False`: the program never serves a gradient, so a custom autograd.Function
    whose forward a strict capture inlines is kept (its backward is never needed).
    A capture that fails frees the Functions and opaque regions it registered (nodes.py)."""
    with nodes.registering():
        exported, strict = _export(module, example_inputs, name, dynamic_shapes, kwargs, strict,
                                   differentiable)
        opaque.warn(exported.graph_module, stacklevel=4)
        if replace:
            rewrite.apply(exported, replace, name,
                          lambda fn, inputs, what: _export(FunctionModule(fn), inputs, what,
                                                           fallback=False)[0])
    return exported, strict


def _export(module: torch.nn.Module, example_inputs: tuple, name: str,
            dynamic_shapes: DynamicShapes = None,
            kwargs: Mapping[str, Any] | None = None,
            strict: bool | None = None,
            differentiable: bool = True, *,
            fallback: bool = True) -> tuple[ExportedProgram, bool | None]:
    # A view as example input (tokens[:, :-1]) makes torch.export guard on its base's sizes,
    # which its own run_decompositions cannot evaluate once the sizes are symbolic.
    inputs, keywords = pytree.tree_map_only(
        torch.Tensor, lambda x: x.clone() if x._base is not None else x,
        (example_inputs, dict(kwargs or {})))
    errors: list[Exception] = []
    # Modules whose backward hooks run as torch's, in opaque regions (hooks.py), which only a
    # non-strict capture makes.
    hooked = hooks.regions(module, name) if fallback else {}
    if hooked and strict:
        path, why = next(iter(hooked.items()))
        raise CaptureError(f"ms_aten: {name}: {why.split(' runs ')[0]} on "
                           f"'{path or type(module).__name__}' runs as an opaque torch call, "
                           f"which a strict capture cannot make", hooks.STRICT_ADVICE, "opaque")
    # Non-strict first: it runs the module's Python as is, and is faster. Strict (TorchDynamo)
    # captures some modules non-strict cannot: transformers' static KV cache, whose in-place
    # cache writes fail non-strict's run_decompositions; not what non-strict refused for a
    # value (a branch, a size from .item()) or a tensor hook, which strict refuses too.
    for attempt in (False, True) if strict is None else (strict,):
        if attempt and errors and (hooked or _caused_by(errors[0], (*_DATA_DEPENDENT,
                                                                   hooks.TensorHook))):
            continue
        try:
            # A capture with regions is searched again for another shape or mode (None).
            return _once(module, inputs, keywords, dynamic_shapes, attempt, differentiable,
                         name, hooked), None if hooked else attempt
        except CaptureError:
            raise  # a construct refused by name: strict would not keep it either
        except Exception as error:  # noqa: BLE001  (torch raises many kinds; the reason is kept)
            # strict: TorchDynamo's node for the hook ran it
            if attempt and _caused_by(error, hooks.TensorHook):
                raise hooks.strict_refusal(name) from error
            errors.append(error)
    failed, *retried = errors
    reason, text = partition.first_line(failed), _reason(failed)
    if retried:  # strict=None: strict's reason follows non-strict's, given once if they agree
        again = _reason(retried[0])
        text += (" (non-strict and strict alike)" if again == text else
                 f"\n(that was non-strict; strict: {again})")
    # A range in dynamic_shapes the model does not take (MobileBERT's sequence length past its
    # position embeddings) is the user's to narrow: an opaque part's run would add the same
    # guards, so no partition is tried, and torch's suggested fixes are kept in the message.
    range_refused, no_meta = _range_refused(failed), _missing_meta_kernel(failed) is not None
    if fallback and strict is None and not no_meta and not range_refused:
        # What torch.export refuses runs as opaque torch calls (opaque.py), the rest captured;
        # a later capture (another shape or mode) searches again (strictness None).
        return _partitioned(module, inputs, keywords, dynamic_shapes, differentiable, name,
                            reason, text, hooked), None
    # torch suggests no fix for a guard such as `n != 2`.
    advice = _RANGE_ADVICE if range_refused and _GUARD in text else ""
    kind: Literal["", "range", "opaque"] = \
        "range" if range_refused else "" if no_meta else "opaque"
    raise CaptureError(f"ms_aten: torch.export cannot capture {name}: {text}", advice,
                       kind) from failed


def _once(module: torch.nn.Module, inputs: tuple, keywords: Mapping[str, Any],
          dynamic_shapes: DynamicShapes, strict: bool, differentiable: bool, name: str,
          regions: Mapping[str, str] | None = None,
          recorded: opaque.Recording | None = None, prefix: str = "") -> ExportedProgram:
    """One torch.export, with the submodules named in `regions` (and functions marked with
    ms_aten.opaque) as opaque nodes; torch's error as it raised it. One that fails frees the
    nodes' entries it registered (a partition's failed tries among them)."""
    # torch 2.13's export (and its run_decompositions) copies its own pytree specs through a
    # deprecated check.
    with warnings.catch_warnings(), nodes.registering():
        warnings.filterwarnings("ignore", _TORCH_DEPRECATION, FutureWarning)
        with contextlib.ExitStack() as stack:
            stack.enter_context(autograd_constructs.capturing(module, name, strict))
            if not strict:
                stack.enter_context(opaque.marking())
                stack.enter_context(opaque.submodules_opaque(module, name, regions or {},
                                                             prefix))
                if recorded is not None:
                    recorded.seen.clear()
                    stack.enter_context(opaque.recording(recorded))
            try:
                exported = torch.export.export(module, tuple(inputs), dict(keywords),
                                               dynamic_shapes=dynamic_shapes, strict=strict)
            except Exception as error:
                refused = error.__cause__ or error.__context__
                if isinstance(refused, CaptureError):  # torch.export wrapped a refusal
                    raise refused from None
                raise
        if strict:
            _refuse_traced_constants(exported)
        if strict and differentiable:
            autograd_constructs.refuse_traced_functions(exported.graph_module, name)
        autograd_constructs.keep_grad_regions(exported.graph_module, name)
        decomposed = exported.run_decompositions({})
        no_grad_writes.refuse_parameter_writes(decomposed, name)
        return decomposed


def _refuse_traced_constants(exported: ExportedProgram) -> None:
    """torch's own refusal, which its non-strict capture makes and its strict one does not: a
    tensor computed in forward that TorchDynamo made a constant of the program (`.data` of an
    intermediate) would hold the capture's values at every call, and torch 2.13's
    run_decompositions dies of it (a segmentation fault)."""
    for attribute, value in exported.constants.items():
        if isinstance(value, FakeTensor):
            raise RuntimeError(
                f"a tensor computed in forward became a constant of the program ({attribute}): "
                f"TorchDynamo traced it as one, as it does `.data` of an intermediate; use "
                f"`.detach()`, which keeps torch's meaning")


def _partitioned(module: torch.nn.Module, inputs: tuple, keywords: Mapping[str, Any],
                 dynamic_shapes: DynamicShapes, differentiable: bool, name: str,
                 reason: str, text: str, hooked: Mapping[str, str]) -> ExportedProgram:
    """The capture with the smallest parts torch.export refuses as opaque nodes
    (partition.py); `reason`: non-strict's refusal of the whole, `text`: every attempt's;
    `hooked`: the modules that are regions for their backward hooks (hooks.py)."""
    def exporter(sub, args, kwargs, regions, recorded, prefix):
        _once(sub, args, kwargs, None, False, differentiable, name, regions, recorded, prefix)

    try:
        regions, recorded = partition.smallest(module, inputs, keywords, reason, exporter,
                                               hooked)
    except CaptureError:
        raise
    except Exception as error:  # noqa: BLE001  (the eager call itself failed)
        raise CaptureError(f"ms_aten: torch.export cannot capture {name}: {text}; and torch "
                           f"eager cannot run it on these inputs: {_reason(error)}") from error
    try:
        return _once(module, inputs, keywords, dynamic_shapes, False, differentiable, name,
                     regions, recorded)
    except CaptureError:
        raise
    except Exception as error:  # noqa: BLE001
        raise CaptureError(f"ms_aten: torch.export cannot capture {name}: {text}; with "
                           f"{', '.join(repr(p) for p in regions)} as opaque torch calls "
                           f"still: {_reason(error)}") from error


def _chain(error: BaseException | None) -> Iterator[BaseException]:
    """`error` and the errors it was raised from (torch wraps them)."""
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


def _caused_by(error: BaseException | None, kinds: type | tuple[type, ...]) -> bool:
    """Whether `error`, or an error it was raised from, is one of `kinds`: a value-dependent
    branch or size (_DATA_DEPENDENT), a tensor hook (hooks.TensorHook)."""
    return any(isinstance(e, kinds) for e in _chain(error))


def _constraint_violation(error: BaseException | None) -> bool:
    """Whether torch.export refused the dynamic_shapes' ranges (guards the model's code makes on
    a dynamic size that the given range does not satisfy)."""
    return any(isinstance(e, UserError) and e.error_type == UserErrorType.CONSTRAINT_VIOLATION
               for e in _chain(error))


def _range_refused(error: BaseException) -> bool:
    """Whether torch.export refused the dynamic_shapes' ranges, not a value: TorchDynamo reports
    a guard on a data-dependent value (a branch, an .item() loop) as a constraint violation
    too."""
    return _constraint_violation(error) and not _caused_by(error, _DATA_DEPENDENT)


def _innermost_frames(text: str) -> str:
    """torch's message with each "User stack:" cut to its innermost frame (the code that
    made the guard, its file, line and source)."""
    kept: list[str] = []
    stack: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("User stack:"):
            stack = []
            kept.append(line)
        elif stack is not None and line.startswith("  "):
            stack.append(line)
        else:
            if stack is not None:
                last = max((i for i, frame in enumerate(stack)
                            if frame.lstrip().startswith("File ")), default=0)
                kept.extend(frame for frame in stack[last:] if frame.strip(" ^"))
                stack = None
            kept.append(line)
    return "\n".join(kept)


def _reason(error: BaseException) -> str:
    """torch's reason for a failed capture, in a few lines; for a range the model does not
    take, every violated guard and torch's suggested fixes (its advice on draft_export
    dropped)."""
    text = str(error).strip()
    if _constraint_violation(error):
        first = _innermost_frames(text.split("\n\nThe error above occurred")[0])
    else:
        first = "\n".join(text.splitlines()[:3]) if text else ""
    return _missing_meta_kernel(error) or f"{type(error).__name__}: {first}"


def _missing_meta_kernel(error: BaseException | None) -> str | None:
    """What to register, when tracing failed on an op that has no Meta kernel (torch reports it
    as UnsupportedOperatorException, maybe wrapped)."""
    for e in _chain(error):
        if isinstance(e, UnsupportedOperatorException):
            return missing_meta_kernel(e.func._schema)
    return None


def example_like(signature: Signature) -> tuple[torch.Tensor, ...]:
    """Zero tensors with a signature's shapes and dtypes, to capture again for new shapes."""
    assert not signature.dynamic, "a dynamic capture is never captured again"
    return tuple(torch.zeros([n for n in s if n is not None], dtype=d)
                 for s, d in zip(signature.shapes, signature.dtypes, strict=True))
