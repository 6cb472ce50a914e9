"""python -m ms_aten.build SOURCE.cpp [-o OUT.so]: compile your own AOT kernel or torch extension.

An AOT kernel (the seed's way) includes <torch/extension.h> (or <ATen/ATen.h>) and "ms_ext.h"
and calls get_torch_tensors; a torch extension registers ops with TORCH_LIBRARY
(examples/custom_extension). The .so gets torch's and ms_aten's include paths, torch's C++ ABI
flag, and an rpath to both libraries, so `ops.Custom("./OUT.so:Func", ..., func_type="aot")` or
`torch.ops.load_library("OUT.so")` loads it after `import ms_aten` with no LD_LIBRARY_PATH.
Every call compiles afresh into a temporary file and renames it over OUT.so: a stale library is
never reused.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import torch
from torch.utils import cpp_extension

from .library import INCLUDE_DIR, LIBRARY, PACKAGE_DIR


class BuildError(RuntimeError):
    """The compiler rejected the kernel; the message holds its output."""


def _torch_flags() -> list[str]:
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"], str(INCLUDE_DIR)]
    return [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-DTORCH_EXTENSION_NAME=ms_aten_user_kernel",
            *(f"-I{path}" for path in includes)]


def _link_flags() -> list[str]:
    torch_lib = Path(torch.__file__).parent / "lib"
    return [f"-L{torch_lib}", f"-L{PACKAGE_DIR}", "-lms_aten", "-lc10", "-ltorch", "-ltorch_cpu",
            f"-Wl,-rpath,{torch_lib}", f"-Wl,-rpath,{PACKAGE_DIR}"]


def command(source: Path, output: Path) -> list[str]:
    """The compiler command line for one kernel source."""
    if source.suffix == ".cu":
        nvcc = shutil.which("nvcc")
        if torch.version.cuda is None or nvcc is None:
            raise BuildError(f"{source} is CUDA code, but this torch has no CUDA "
                             f"(torch.version.cuda={torch.version.cuda}) or nvcc is missing")
        cuda_lib = Path(cpp_extension.CUDA_HOME or "/usr/local/cuda") / "lib64"
        return [nvcc, "-O2", "-std=c++20", "-shared", "-Xcompiler", "-fPIC", *_torch_flags(),
                str(source), "-o", str(output), *_link_flags(), "-lc10_cuda", "-ltorch_cuda",
                f"-L{cuda_lib}", "-lcudart"]
    compiler = os.environ.get("CXX", "g++")
    return [compiler, "-O2", "-std=c++20", "-shared", "-fPIC", *_torch_flags(), str(source), "-o",
            str(output), *_link_flags()]


def build(source: str | os.PathLike, output: str | os.PathLike | None = None) -> Path:
    """Compile `source` into `output` (default: <stem>.so beside it); returns the .so path."""
    source = Path(source).resolve()
    if not source.is_file():
        raise FileNotFoundError(f"kernel source {source} does not exist")
    if not LIBRARY.is_file():
        raise BuildError(f"{LIBRARY} is missing; build ms_aten first (bash scripts/setup.sh)")
    output = Path(output).resolve() if output else source.with_suffix(".so")
    with tempfile.TemporaryDirectory(dir=output.parent) as scratch:
        staged = Path(scratch) / output.name
        result = subprocess.run(command(source, staged), capture_output=True, text=True)
        if result.returncode != 0:
            raise BuildError(f"compiling {source} failed:\n{result.stderr.strip()}")
        os.replace(staged, output)  # atomic: a loader never sees a half-written file
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ms_aten.build",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("source", help="source (.cpp, or .cu with a CUDA torch)")
    parser.add_argument("-o", "--output", help="output .so (default: beside the source)")
    args = parser.parse_args(argv)
    try:
        print(build(args.source, args.output))
    except (BuildError, FileNotFoundError) as error:
        print(f"ms_aten.build: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
