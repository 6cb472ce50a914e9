"""Capturing a torch module or function with torch.export, for the program route (program.py)."""
from __future__ import annotations

import torch
from torch.export import ExportedProgram

from .program import CaptureError, Signature


def export(module: torch.nn.Module, example_inputs: tuple, name: str) -> ExportedProgram:
    """torch.export of `module`, functionalized, with high-level ATen ops kept (an empty
    decomposition table keeps linear, layer_norm, scaled_dot_product_attention: their CPU
    kernels are faster than their decompositions); CaptureError carries torch's reason."""
    try:
        exported = torch.export.export(module, tuple(example_inputs), strict=False)
        return exported.run_decompositions({})
    except Exception as error:  # noqa: BLE001  (torch raises many kinds; the reason is kept)
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CaptureError(f"ms_aten: torch.export cannot capture {name}: "
                           f"{type(error).__name__}: {first}") from error


def example_like(signature: Signature) -> tuple[torch.Tensor, ...]:
    """Zero tensors with a signature's shapes and dtypes, to capture again for new shapes."""
    return tuple(torch.zeros(s, dtype=d)
                 for s, d in zip(signature.shapes, signature.dtypes, strict=True))
