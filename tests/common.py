"""The test suite's helpers: ms_aten.testing's (one source for them), on MindSpore's CPU, and
a driver for the bridge library's C API."""
from __future__ import annotations

import ctypes
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import mindspore as ms
import numpy as np

import ms_aten
from ms_aten.native import library
from ms_aten.testing import (  # noqa: F401  (re-exported for the tests)
    MODES,
    OpCell,
    as_tuple,
    assert_same,
    cotangents,
    flat,
    randn,
    regroup,
    run,
    set_mode,
    to_ms,
    to_torch,
    torch_grads,
)

ms.set_device("CPU")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(path: str) -> ModuleType:
    """examples/<path>.py imported as a module named after its path ('custom_extension/example'
    -> custom_extension_example)."""
    name = path.replace("/", "_")
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{path}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # MindSpore's graph parser looks modules up by name
    spec.loader.exec_module(module)
    return module


class BridgeKernel:
    """One libms_aten.so kernel driven through its C API (ctypes) as MindSpore drives it: made
    from an op spec, launched on numpy buffers (inputs, then outputs), destroyed on exit."""

    _api = None  # the library, its C functions typed on first use

    def __init__(self, spec: str):
        if BridgeKernel._api is None:
            lib = library.load()
            lib.ms_aten_kernel_create.restype = ctypes.c_void_p
            lib.ms_aten_kernel_create.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
            lib.ms_aten_kernel_destroy.argtypes = [ctypes.c_void_p]
            lib.ms_aten_kernel_uses_out.argtypes = [ctypes.c_void_p]
            lib.ms_aten_kernel_launch.argtypes = [
                ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)),
                ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p, ctypes.c_size_t]
            BridgeKernel._api = lib
        self.handle = self._api.ms_aten_kernel_create(spec.encode(), None)

    def __enter__(self) -> BridgeKernel:
        return self

    def __exit__(self, *exc) -> None:
        self._api.ms_aten_kernel_destroy(self.handle)

    def launch(self, arrays: list[np.ndarray], dtype_names: list[str] | None = None) -> str:
        """Runs the kernel on `arrays`; '' or the error message."""
        n = len(arrays)
        params = (ctypes.c_void_p * n)(*(a.ctypes.data for a in arrays))
        ndims = (ctypes.c_int * n)(*(a.ndim for a in arrays))
        # 0-dim tensors arrive with a NULL shape, as MindSpore sends them.
        shapes = (ctypes.POINTER(ctypes.c_int64) * n)(*(
            (ctypes.c_int64 * a.ndim)(*a.shape) if a.ndim else None for a in arrays))
        names = dtype_names or [str(a.dtype) for a in arrays]
        types = (ctypes.c_char_p * n)(*(d.encode() for d in names))
        error = ctypes.create_string_buffer(1024)
        status = self._api.ms_aten_kernel_launch(self.handle, n, params, ndims, shapes, types,
                                                 error, 1024)
        assert status == (1 if error.value else 0)
        return error.value.decode()

    def uses_out(self) -> bool:
        """Whether launches write through the op's out= overload (csrc/launch/kernel.h)."""
        return self._api.ms_aten_kernel_uses_out(self.handle) == 1


def run_fresh(args: list[str], unset: tuple[str, ...] = (), timeout: int = 600,
              env: dict[str, str] | None = None) -> str:
    """python `args` in a fresh process with this ms_aten on its path, the variables `unset`
    out of its environment and `env` added; its standard output, once it has succeeded."""
    done = start_fresh(args, unset, timeout, env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def start_fresh(args: list[str], unset: tuple[str, ...] = (), timeout: int = 600,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """run_fresh's process, however it ended."""
    environment = {k: v for k, v in os.environ.items() if k not in unset} | (env or {})
    environment["PYTHONPATH"] = str(Path(ms_aten.__file__).parents[1])  # this ms_aten
    return subprocess.run([sys.executable, *args], env=environment, capture_output=True,
                          text=True, timeout=timeout)


def resident_mib() -> float:
    """This process's resident memory, MiB, once ms_aten's launch thread has given back an idle
    OpenMP team (within 8 ms of its last launch: docs/devices.md, "Threads on the CPU"), so
    that readings do not count its workers' memory by turns (about 12 MiB here)."""
    time.sleep(0.02)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def launch_thread_ids() -> set[str]:
    """The ids of this process's threads named "ms_aten launch": the launch thread and the
    OpenMP workers it started (csrc/launch/launch_thread.h)."""
    found = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                if comm.read().strip() == "ms_aten launch":
                    found.add(tid)
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
    return found


def growth_per_cell(resident: Sequence[float]) -> float:
    """MiB per Cell of a process's resident memory, read after each of Cells made and dropped
    in turn: the median of its growths over two Cells at a time, halved. A Cell that stays shows
    in each; one step of the allocator's arenas in two at most; and Cells of two kinds made in
    turn, whose allocations differ, cancel out (single steps alternating +8 and -8 MiB once
    read as 6 MiB per Cell with every Cell freed)."""
    return statistics.median(np.subtract(resident[2:], resident[:-2]) / 2)


def record_calls(monkeypatch: Any, module: ModuleType, name: str) -> list:
    """Wraps `module.name` (for the test's duration) so that each call's first argument is
    appended to the list returned, then the real function runs."""
    calls: list = []
    real = getattr(module, name)

    def recording(first, *rest):
        calls.append(first)
        return real(first, *rest)
    monkeypatch.setattr(module, name, recording)
    return calls
