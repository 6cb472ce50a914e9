"""Capturing a torch module or function with torch.export, for the program route (program.py),
with the user's subgraph replacements applied (rewrite.py)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch._subclasses.fake_tensor import UnsupportedOperatorException
from torch.export import ExportedProgram

from ..ops.schema import missing_meta_kernel
from . import rewrite
from .program import CaptureError, Signature


class FunctionModule(torch.nn.Module):
    """torch.export captures modules; this one calls a plain function."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def export(module: torch.nn.Module, example_inputs: tuple, name: str,
           replace: Sequence = ()) -> ExportedProgram:
    """torch.export of `module`, functionalized, with high-level ATen ops kept (an empty
    decomposition table keeps linear, layer_norm, scaled_dot_product_attention: their CPU
    kernels are faster than their decompositions); CaptureError carries torch's reason. Each
    (pattern, replacement) of `replace` is then applied in turn (rewrite.py), its pattern and
    replacement captured the same way."""
    exported = _export(module, example_inputs, name)
    if replace:
        rewrite.apply(exported, replace, name,
                      lambda fn, inputs, what: _export(FunctionModule(fn), inputs, what))
    return exported


def _export(module: torch.nn.Module, example_inputs: tuple, name: str) -> ExportedProgram:
    try:
        exported = torch.export.export(module, tuple(example_inputs), strict=False)
        return exported.run_decompositions({})
    except Exception as error:  # noqa: BLE001  (torch raises many kinds; the reason is kept)
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        reason = _missing_meta_kernel(error) or f"{type(error).__name__}: {first}"
        raise CaptureError(f"ms_aten: torch.export cannot capture {name}: {reason}") from error


def _missing_meta_kernel(error: BaseException | None) -> str | None:
    """What to register, when tracing failed on an op that has no Meta kernel (torch reports it
    as UnsupportedOperatorException, maybe wrapped)."""
    while error is not None:
        if isinstance(error, UnsupportedOperatorException):
            return missing_meta_kernel(error.func._schema)
        error = error.__cause__ or error.__context__
    return None


def example_like(signature: Signature) -> tuple[torch.Tensor, ...]:
    """Zero tensors with a signature's shapes and dtypes, to capture again for new shapes."""
    return tuple(torch.zeros(s, dtype=d)
                 for s, d in zip(signature.shapes, signature.dtypes, strict=True))
