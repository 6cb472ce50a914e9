"""The PYNATIVE fast-path module: a MindSpore CustomOpBuilder (pyboost) module compiled from
csrc/pyboost/fast_path.cpp, which runs libms_aten.so's kernels through MindSpore's PyNative
pipeline (ms_aten/ops/fast_path.py routes op calls to it).

The module is compiled at install time, next to libms_aten.so (setup.py runs pyboost_build); at
run time it is only loaded. When it is missing, `available()` is False and callers keep using
the Custom route; when it exists but cannot be loaded, a warning says why, once.
"""
from __future__ import annotations

import importlib.util
import sys
import time
import warnings
from collections.abc import Callable
from functools import cache, wraps
from pathlib import Path
from types import ModuleType
from typing import ParamSpec, TypeVar

import mindspore as ms
from mindspore.graph.api import _pynative_executor

from . import pyboost_build
from .library import LIBRARY, PACKAGE_DIR

P = ParamSpec("P")
R = TypeVar("R")

MODULE_NAME = pyboost_build.MODULE_NAME
MODULE_PATH = PACKAGE_DIR / pyboost_build.MODULE_FILE
# A source checkout (not an installed package) can rebuild the module in place.
CSRC = PACKAGE_DIR.parent / "csrc"


def build() -> Path:
    """Rebuild the module in a source checkout (pip install and setup.py build_ext do it too).

    A process that already loaded the module keeps the old one. RuntimeError with the compiler's
    output when the build fails, or when there is no csrc/ beside the package.
    """
    if not (CSRC / "pyboost" / "fast_path.cpp").is_file():
        raise RuntimeError(f"no sources at {CSRC}: an installed ms_aten is rebuilt by "
                           f"reinstalling it (pip install --no-build-isolation ms_aten)")
    path = pyboost_build.build(CSRC, LIBRARY, MODULE_PATH,
                               PACKAGE_DIR.parent / "build" / "fast_path")
    _module.cache_clear()
    return path


@cache
def _module() -> ModuleType | None:
    """The loaded fast-path module, or None (missing: silently; unusable: with a warning)."""
    if not MODULE_PATH.is_file():
        return None
    module = sys.modules.get(MODULE_NAME)  # an extension module initializes once per process
    if module is None:
        spec = importlib.util.spec_from_file_location(MODULE_NAME, MODULE_PATH)
        # A ".so" path always gets an ExtensionFileLoader.
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except ImportError as error:
            warnings.warn(f"ms_aten: cannot load {MODULE_PATH} ({error}); PYNATIVE calls use "
                          f"the slower Custom route", RuntimeWarning, stacklevel=3)
            return None
        sys.modules[MODULE_NAME] = module
    if module.mindspore_version != ms.__version__:
        warnings.warn(f"ms_aten: {MODULE_PATH} was built for MindSpore "
                      f"{module.mindspore_version}, not {ms.__version__}; PYNATIVE calls use the "
                      f"slower Custom route until ms_aten is rebuilt for it",
                      RuntimeWarning, stacklevel=3)
        return None
    return module


def module() -> ModuleType:
    """The loaded module; RuntimeError saying how to build it when it is not available."""
    loaded = _module()
    if loaded is None:
        raise RuntimeError("ms_aten's fast-path module is not built "
                           "(python -m ms_aten.native.pyboost)")
    return loaded


def available() -> bool:
    """Whether the fast-path module was built and loads."""
    return _module() is not None


def clears_executor_on_error(call: Callable[P, R]) -> Callable[P, R]:
    """`call`, which on an exception does what MindSpore does when one of its own PYNATIVE ops
    fails: clear the PYNATIVE executor's state, then re-raise.

    To MindSpore an exception from a fast-path call is a Python exception inside the function
    ms.grad records, which leaves that recording open: the grad flag stays set, and the next
    ms.grad or jit call is differentiated as if nested in it, one order too high.
    """
    @wraps(call)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return call(*args, **kwargs)
        except Exception:
            _pynative_executor.clear_res()
            raise
    return guarded


def main() -> int:
    """python -m ms_aten.native.pyboost: rebuild the module in a source checkout."""
    start = time.perf_counter()
    try:
        path = build()
    except RuntimeError as error:
        print(f"ms_aten.native.pyboost: build failed: {error}", file=sys.stderr)
        return 1
    print(f"{path} built in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
