"""Finding and checking the compiled bridge library, libms_aten.so."""
from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # ms_aten/, where the build puts it
LIBRARY = PACKAGE_DIR / "libms_aten.so"
INCLUDE_DIR = PACKAGE_DIR / "include"
REBUILD_HINT = "rebuild it with `bash scripts/setup.sh` (or `pip install --no-build-isolation .`)"


@cache
def load() -> ctypes.CDLL:
    """The loaded bridge library; ImportError saying how to rebuild if it is missing or broken."""
    if not LIBRARY.is_file():
        raise ImportError(f"ms_aten's bridge library {LIBRARY} is missing; {REBUILD_HINT}")
    try:
        lib = ctypes.CDLL(str(LIBRARY))
        lib.ms_aten_torch_version.restype = ctypes.c_char_p
        built_for = lib.ms_aten_torch_version().decode()
        for symbol in ("MsAtenCall", "MsAtenCallInit", "MsAtenCallInferShape", "ms_aten_infer"):
            getattr(lib, symbol)
    except (OSError, AttributeError) as error:
        raise ImportError(f"ms_aten's bridge library {LIBRARY} cannot be loaded ({error}); "
                          f"{REBUILD_HINT}") from error
    running = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if built_for != running:
        raise ImportError(f"{LIBRARY} was built against torch {built_for}, but torch "
                          f"{torch.__version__} is installed; {REBUILD_HINT}")
    return lib


# MindSpore device target -> the library's AOT entry point for it (csrc/boundary/entry.cpp).
ENTRY_POINTS = {"CPU": "MsAtenCall", "GPU": "MsAtenCallCuda", "Ascend": "MsAtenCallNpu"}


def kernel(target: str, multi_output: bool = False) -> str:
    """The `func` string of ops.Custom for the bridge's kernel on a MindSpore device target;
    multi-output ops get an entry point of their own (csrc/boundary/entry.cpp says why).

    RuntimeError, before anything launches, if this build cannot serve the target.
    """
    if target not in ENTRY_POINTS:
        raise ValueError(f"unknown device target {target!r}; "
                         f"expected one of {sorted(ENTRY_POINTS)}")
    lib = load()
    lib.ms_aten_supports.restype = ctypes.c_int
    if not lib.ms_aten_supports(target.encode()):
        backend = {"GPU": "CUDA", "Ascend": "Ascend NPU"}[target]
        raise RuntimeError(
            f"ms_aten was built without {backend} support (torch {torch.__version__}); run the "
            f"op on CPU with op.set_device('CPU'), or reinstall ms_aten next to a {backend} torch")
    return f"{LIBRARY}:{ENTRY_POINTS[target]}{'Multi' if multi_output else ''}"


def current_target() -> str:
    """MindSpore's device target ("CPU", "GPU" or "Ascend"): the setting ms.get_context reads,
    read in ~1 µs instead of ~8 (its argument checks); it runs on every PYNATIVE call."""
    from mindspore import context
    from mindspore._c_expression import ms_ctx_param

    return context._context().get_param(ms_ctx_param.device_target)


def launch_count() -> int:
    """How many ms_aten kernel launches this process made (forwards, backwards, programs):
    a whole-model forward is one."""
    lib = load()
    lib.ms_aten_launch_count.restype = ctypes.c_int64
    return int(lib.ms_aten_launch_count())


def host_read_count() -> int:
    """How many times ms_aten's launches read tensor values back to the host (an item(), a
    nonzero, a recorded RNG state read on a device): on a GPU each waits for the stream.
    Counting starts at the first call (csrc/launch/kernel.h, host_read_count)."""
    lib = load()
    lib.ms_aten_host_read_count.restype = ctypes.c_int64
    return int(lib.ms_aten_host_read_count())


@cache
def has_autograd(name: str, overload: str) -> bool:
    """Whether torch differentiates the dispatcher op `name` (overload "" for the unnamed one)
    itself, by a kernel of its own (csrc/op/grad.h, has_autograd_kernel); False where a backward
    through it would get torch's autograd fallback, which passes no gradient back."""
    function = load().ms_aten_op_has_autograd
    function.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    function.restype = ctypes.c_int
    answer = function(name.encode(), overload.encode())
    if answer < 0:
        raise ValueError(f"the dispatcher knows no op {name}{'.' + overload if overload else ''}")
    return bool(answer)
