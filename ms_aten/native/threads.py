"""How many intra-op threads ATen uses inside bridged kernels."""
from __future__ import annotations

import os

from . import library

ENV = "MS_ATEN_NUM_THREADS"


def set_num_threads(n: int) -> None:
    """Use n ATen threads in every bridged kernel launched from now on; 0 means ATen's default
    (one per core). It applies on ms_aten's launch thread, where bridged kernels run their ATen
    work (csrc/launch/launch_thread.h), which torch.set_num_threads, a per-thread OpenMP setting
    there, does not reach."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"ms_aten.set_num_threads expects an int >= 0, got {n!r}")
    library.load().ms_aten_set_num_threads(n)


def get_num_threads() -> int:
    """The configured count (0: ATen's default)."""
    return library.load().ms_aten_get_num_threads()


def release_idle_team() -> bool:
    """Gives back the calling thread's idle OpenMP workers, if it has any
    (csrc/launch/launch_thread.h): after a capture, whose torch work (like the model's
    construction before it) left the thread a team beside the launch thread's, which would make
    libgomp throttle both. The thread's next parallel region starts its team again. False where
    nothing was released."""
    return bool(library.load().ms_aten_release_idle_team())


def configure_from_environment() -> None:
    value = os.environ.get(ENV)
    if value:
        try:
            set_num_threads(int(value))
        except ValueError as error:
            raise ValueError(f"{ENV}={value!r}: {error}") from None
