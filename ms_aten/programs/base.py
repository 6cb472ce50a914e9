"""What every stage of the program route shares, below them all: the error a capture raises,
the signature of a program's inputs, and the handle of what compile=True built."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch


class CaptureError(RuntimeError):
    """A torch module or function that cannot become an ms_aten program.

    Its message is `reason`, then `advice`: what the caller of the capture can change. `kind`
    says what refused it: "range", a dynamic_shapes range the model's code does not take;
    "opaque", what runs as an opaque torch call only where the capture may make one (not
    strict); "" anything else. A route that chose the capture's options itself
    (ms_aten.causal_lm) gives the reason with its own explanation instead of the advice."""

    def __init__(self, reason: str, advice: str = "",
                 kind: Literal["", "range", "opaque"] = "") -> None:
        super().__init__(reason + advice)
        self.reason = reason
        self.advice = advice
        self.kind = kind


Shape = tuple[int | None, ...]  # None: a size torch.export keeps symbolic (dynamic_shapes)


@dataclass(frozen=True)
class Signature:
    """Shapes and torch dtypes of a program's inputs, as captured."""

    shapes: tuple[Shape, ...]
    dtypes: tuple[torch.dtype, ...]

    @property
    def dynamic(self) -> bool:
        return any(size is None for shape in self.shapes for size in shape)

    def describe(self) -> str:
        """"float32[2, 8], int64[]" ("?" for a dynamic size): for a static capture, also the
        key of a family's programs in the library (csrc/program/family.cpp, signature_key)."""
        return ", ".join(
            f"{str(d).removeprefix('torch.')}[{', '.join('?' if n is None else str(n) for n in s)}]"
            for s, d in zip(self.shapes, self.dtypes, strict=True))

    def mismatch(self, other: Signature) -> str | None:
        """Why `other` (a call's signature, -1 for a size not known yet) cannot run a program
        captured with this one, or None."""
        if len(other.shapes) != len(self.shapes):
            return f"{len(other.shapes)} inputs, where the program takes {len(self.shapes)}"
        for i, (shape, dtype, got_shape, got_dtype) in enumerate(zip(
                self.shapes, self.dtypes, other.shapes, other.dtypes, strict=True)):
            sizes_fit = len(got_shape) == len(shape) and all(
                want is None or got in (want, -1) for want, got in zip(shape, got_shape,
                                                                        strict=True))
            if got_dtype != dtype or not sizes_fit:
                return (f"input {i} is {Signature((got_shape,), (got_dtype,)).describe()}, where "
                        f"the program takes {Signature((shape,), (dtype,)).describe()}")
        return None


@dataclass(frozen=True)
class Compiled:
    """What compiling one capture did: its cache key and directory, whether it was compiled now
    (else loaded from the cache) and how long that took."""

    key: str
    path: Path
    training: bool
    cached: bool
    seconds: float
