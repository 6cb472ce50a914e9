"""The cache of the large blocks ATen frees on ms_aten's launch thread
(csrc/launch/launch_allocator.h): a launch reuses the memory the launches before it freed, where
glibc would give it back to the system and page-fault it in anew."""
from __future__ import annotations

import ctypes
import os

from . import library

ENV = "MS_ATEN_CPU_CACHE_MB"
# The most MiB whose bytes the library's int64 limit holds (csrc/launch/launch_allocator.cpp).
MAX_MB = (2**63 - 1) >> 20


def cached_bytes() -> int:
    """Bytes the cache holds for reuse now (blocks in use are not counted)."""
    lib = library.load()
    lib.ms_aten_cached_bytes.restype = ctypes.c_int64
    return int(lib.ms_aten_cached_bytes())


def empty_cache() -> None:
    """Gives every cached block back to the C library, as torch.cuda.empty_cache() does for
    CUDA's cache; later launches fill the cache again."""
    library.load().ms_aten_empty_cache()


def release_free_heap() -> bool:
    """Gives the C library's free heap memory back to the system (glibc's `malloc_trim`; it
    changes no setting): after a capture, whose torch.export freed temporaries of about 1.4
    times the weights (a 0.5B-parameter Llama: 2.7 GiB) that glibc keeps for reuse otherwise,
    resident beside the model for the process's life. False where the C library has none."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    return trim is not None and bool(trim(0))


def check_environment() -> None:
    """MS_ATEN_CPU_CACHE_MB, the cache's limit in MiB (0: no cache), read by the launch thread
    when it starts; refused here if it is not a whole number from 0 to MAX_MB."""
    value = os.environ.get(ENV)
    if value and not (value.isascii() and value.isdigit() and int(value) <= MAX_MB):
        raise ValueError(f"{ENV}={value!r}: expected a whole number of MiB from 0 (no cache) "
                         f"to {MAX_MB}")
