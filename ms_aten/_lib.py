"""Finding and checking the compiled bridge library, libms_aten.so."""
from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path

import torch

PACKAGE_DIR = Path(__file__).resolve().parent
LIBRARY = PACKAGE_DIR / "libms_aten.so"
INCLUDE_DIR = PACKAGE_DIR / "include"
REBUILD_HINT = "rebuild it with `bash scripts/setup.sh` (or `pip install --no-build-isolation .`)"


@lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    """The loaded bridge library; ImportError saying how to rebuild if it is missing or broken."""
    if not LIBRARY.is_file():
        raise ImportError(f"ms_aten's bridge library {LIBRARY} is missing; {REBUILD_HINT}")
    try:
        lib = ctypes.CDLL(str(LIBRARY))
        lib.ms_aten_torch_version.restype = ctypes.c_char_p
        built_for = lib.ms_aten_torch_version().decode()
        for symbol in ("MsAtenCall", "MsAtenCallInit"):
            getattr(lib, symbol)
    except (OSError, AttributeError) as error:
        raise ImportError(f"ms_aten's bridge library {LIBRARY} cannot be loaded ({error}); "
                          f"{REBUILD_HINT}") from error
    running = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if built_for != running:
        raise ImportError(f"{LIBRARY} was built against torch {built_for}, but torch "
                          f"{torch.__version__} is installed; {REBUILD_HINT}")
    return lib


def kernel(symbol: str) -> str:
    """The `func` string of ops.Custom for an AOT kernel of the bridge library."""
    library()
    return f"{LIBRARY}:{symbol}"
