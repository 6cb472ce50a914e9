"""A program family in the bridge library (csrc/program/family.h): the captures of one
primitive, one per input signature (a dynamic capture under "*", every signature), registered
once; their output shapes for a call's input shapes; and the spec attribute of the family's
forward and VJP kernels."""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import cache
from urllib.parse import quote

from ...native import library
from ...ops.infer import EMIT, ERROR_BYTES, c_shapes
from ..base import CaptureError
from ..lowering.program import Program

# The family key of a capture with dynamic shapes (csrc/program/family.h, kAnySignature).
ANY_SIGNATURE = "*"


def register(family: str, program: Program) -> None:
    """Hands a capture to the library under its family and input signature (csrc/
    program/family.h; a dynamic capture under "*", every signature), which decodes both specs
    now: a node it cannot run fails before any launch, as a CaptureError."""
    lib = library.load()
    lib.ms_aten_program_register.argtypes = [ctypes.c_char_p] * 4 + [ctypes.c_char_p,
                                                                      ctypes.c_size_t]
    error = ctypes.create_string_buffer(4096)
    key = ANY_SIGNATURE if program.dynamic else program.signature.describe()
    if lib.ms_aten_program_register(family.encode(), key.encode(),
                                    program.spec.encode(), program.vjp_spec.encode(),
                                    error, len(error)):
        message = error.value.decode().removeprefix("ms_aten: program: ")
        raise CaptureError(f"ms_aten: {program.name}: {message}")


@cache
def _shapes_function():
    function = library.load().ms_aten_program_shapes
    function.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int),
                         ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)), EMIT, ctypes.c_void_p,
                         ctypes.c_char_p, ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


def output_shapes(family: str, shapes: Sequence[Sequence[int]]) -> list[list[int]]:
    """A dynamic capture's output shapes for inputs of these shapes (-1: not known yet), from
    the library (family: the primitive's spec attribute), which checks each size against its
    range: ValueError naming the input, the dim, the size and the range."""
    ndims, pointers = c_shapes(shapes)
    out: list[list[int]] = []

    def emit(_context, ndim: int, dims, _dtype: bytes) -> None:
        out.append([dims[i] for i in range(ndim)])

    error = ctypes.create_string_buffer(ERROR_BYTES)
    if _shapes_function()(family.encode(), ndims, pointers, EMIT(emit), None, error,
                          ERROR_BYTES):
        raise ValueError(error.value.decode(errors="replace"))
    return out


def family_spec(kind: str, program: Program, family: str) -> str:
    """The primitive attribute of a program family's forward ("call") or VJP kernel."""
    return (f"family {kind} {quote(program.name, safe='')} {family} {program.n_weights} "
            f"{len(program.signature.shapes)}")
