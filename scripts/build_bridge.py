"""Builds libms_aten.so alone, against the torch of the Python that runs this, without MindSpore.

setup.py also builds the PYNATIVE fast-path module, a MindSpore CustomOpBuilder module, so it needs
MindSpore; a machine with a CUDA torch and no MindSpore (scripts/gpu_check.sh) builds only the
bridge, with setup.py's sources and flags (read from setup.py, never imported: it runs the build),
one compiler process per source, and no libtorch_python (nothing here calls Python):

    python scripts/build_bridge.py OUT_DIR [--cuda] [--jobs N] [--dry-run]

--cuda compiles the CUDA backend (-DWITH_CUDA, CUDA_HOME's headers, c10_cuda, torch_cuda, cudart);
--dry-run prints the commands instead.
"""
from __future__ import annotations

import argparse
import ast
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch.utils.cpp_extension import include_paths

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
COMPILER = os.environ.get("CXX", "c++")
TORCH_LIB = Path(torch.__file__).parent / "lib"
# The unit that reads MindSpore's AotExtra: MindSpore's old std::string ABI, no torch header.
ABI0_UNIT = "boundary/extra_abi0.cpp"
ABI0_FLAGS = ["-fPIC", "-O2", "-std=c++17", "-fvisibility=hidden", "-D_GLIBCXX_USE_CXX11_ABI=0"]


def setup_constant(name: str) -> list[str]:
    """A module-level list literal of setup.py."""
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == name for target in node.targets):
            return list(ast.literal_eval(node.value))
    raise LookupError(f"setup.py assigns no {name}")


def cuda_home() -> Path:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    if not (Path(home) / "include" / "cuda_runtime_api.h").is_file():
        raise SystemExit(f"build_bridge: no CUDA toolkit headers under {home}; set CUDA_HOME")
    return Path(home)


def commands(out: Path, cuda: bool) -> tuple[list[list[str]], list[str]]:
    """One compile command per source, and the link command."""
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    device_flags, libraries = [], ["-L", str(TORCH_LIB), "-lc10", "-ltorch", "-ltorch_cpu"]
    rpaths = [TORCH_LIB]
    if cuda:
        home = cuda_home()
        device_flags = ["-DWITH_CUDA", f"-I{home / 'include'}"]
        libraries += ["-lc10_cuda", "-ltorch_cuda", "-L", str(home / "lib64"), "-lcudart"]
        rpaths.append(home / "lib64")
    # NDEBUG as in setup.py's build, where Python's own compiler flags bring it.
    torch_flags = [*setup_constant("CXXFLAGS"), "-fPIC", "-DNDEBUG", abi,
                   "-DTORCH_API_INCLUDE_EXTENSION_H",
                   *device_flags, f"-I{CSRC}", *(f"-I{p}" for p in include_paths())]
    compiles, objects = [], []
    for unit in [*setup_constant("TORCH_SOURCES"), ABI0_UNIT]:
        objects.append(str(out / "objects" / unit.replace("/", "_").replace(".cpp", ".o")))
        flags = ABI0_FLAGS + [f"-I{CSRC}"] if unit == ABI0_UNIT else torch_flags
        compiles.append([COMPILER, *flags, "-c", str(CSRC / unit), "-o", objects[-1]])
    link = [COMPILER, "-shared", *objects, "-o", str(out / "libms_aten.so"),
            "-Wl,-soname,libms_aten.so", *libraries, *(f"-Wl,-rpath,{p}" for p in rpaths)]
    return compiles, link


def run(command: list[str]) -> tuple[list[str], subprocess.CompletedProcess]:
    return command, subprocess.run(command, capture_output=True, text=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where libms_aten.so (and objects/) go")
    parser.add_argument("--cuda", action="store_true", help="with the CUDA backend")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    compiles, link = commands(args.out.resolve(), args.cuda)
    if args.dry_run:
        print("\n".join(shlex.join(c) for c in [*compiles, link]))
        return 0
    (args.out / "objects").mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        failed = [(command, result) for command, result in pool.map(run, compiles)
                  if result.returncode != 0]
    # Every unit that fails, not the first: a device run has minutes for the whole build.
    for command, result in failed:
        print(f"build_bridge: {shlex.join(command)}\n{result.stderr}", file=sys.stderr)
    if failed:
        return 1
    _, result = run(link)
    if result.returncode != 0:
        print(f"build_bridge: {shlex.join(link)}\n{result.stderr}", file=sys.stderr)
        return 1
    print(f"build_bridge: {args.out / 'libms_aten.so'} (torch {torch.__version__}"
          f"{', WITH_CUDA' if args.cuda else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
