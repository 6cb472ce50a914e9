"""Compiling the PYNATIVE fast-path module (csrc/pyboost/fast_path.cpp) with CustomOpBuilder.

It runs at build time: setup.py loads this file by path (the ms_aten package cannot be imported
before its bridge library exists), so it imports nothing from ms_aten.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

MODULE_NAME = "ms_aten_fast_path"
MODULE_FILE = f"{MODULE_NAME}.so"


def build(csrc: Path, library: Path, output: Path, build_dir: Path) -> Path:
    """Compile csrc/pyboost/fast_path.cpp against `library` (libms_aten.so) into `output`.

    The module is linked with an rpath of $ORIGIN: it must be installed beside the library.
    `build_dir` keeps ninja's objects, so an unchanged source rebuilds in seconds. Returns
    `output`; RuntimeError (with the compiler's output) when the build fails.
    """
    import mindspore as ms
    from mindspore.ops import CustomOpBuilder

    csrc, library = csrc.resolve(), library.resolve()  # ninja runs in build_dir
    if not library.is_file():
        raise RuntimeError(f"{library} is missing: build ms_aten's bridge library first")
    build_dir.mkdir(parents=True, exist_ok=True)
    # A build killed half-way leaves CustomOpBuilder's lock, and the next build would wait on it
    # forever; builds of one tree do not run concurrently.
    (build_dir / "build.lock").unlink(missing_ok=True)
    builder = CustomOpBuilder(
        name=MODULE_NAME,
        sources=[str(csrc / "pyboost" / "fast_path.cpp")],
        backend="CPU",
        include_paths=[str(csrc)],
        # '$$' is ninja's escape for '$'; the quotes keep the shell from expanding $ORIGIN.
        # mindspore_common holds GradState, which CustomOpBuilder does not link by default.
        ldflags=f"-L{library.parent} -lms_aten -Wl,-rpath,'$$ORIGIN' -lmindspore_common",
        # The module binds to MindSpore's C++ internals: it records the version it was built
        # against (a bare pp-number the source stringizes), and fast_path refuses any other.
        cflags=f"-DMS_ATEN_MINDSPORE_VERSION={ms.__version__}",
        build_dir=str(build_dir),
    )
    # CustomOpBuilder runs `ninja` from PATH; pip installs it next to this interpreter, which
    # an unactivated venv does not put on PATH.
    saved_path = os.environ.get("PATH", "")
    if shutil.which("ninja") is None:
        os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), saved_path])
    try:
        built = Path(builder.build())
    finally:
        os.environ["PATH"] = saved_path
    install(built, output)
    return output


def install(built: Path, output: Path) -> None:
    """Copy `built` to `output` as a new file renamed over the old one, so that a process that
    has the old module mapped keeps it intact."""
    staged = output.with_name(output.name + ".tmp")
    shutil.copy2(built, staged)
    os.replace(staged, output)
