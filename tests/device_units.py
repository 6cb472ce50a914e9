"""Compile checks of the device backends' C++ (tests/test_devices.py): every unit a device macro
(WITH_CUDA, WITH_NPU) changes, compiled with -fsyntax-only and setup.py's flags against the
backend's headers; and the headers of the torch_npu wheel that matches this torch, fetched once.
"""
from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch
from torch.utils.cpp_extension import include_paths

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
# The compiler torch's BuildExtension runs.
COMPILER = os.environ.get("CXX", "c++")


# scripts/build_bridge.py, the GPU machine's build, reads setup.py's lists for both (setup.py
# cannot be imported: it runs the build).
setup_constant = runpy.run_path(str(ROOT / "scripts" / "build_bridge.py"))["setup_constant"]


def units_with(macro: str) -> list[str]:
    """The C++ units under csrc/ (paths relative to it) with a preprocessor condition on `macro`.

    Headers hold no device code (device/device.h declares every backend in every build), so
    these units are all that the macro changes.
    """
    condition = re.compile(rf"^\s*#\s*(?:if|ifdef|ifndef|elif)\b.*\b{macro}\b", re.MULTILINE)
    return sorted(str(path.relative_to(CSRC)) for path in CSRC.rglob("*.cpp")
                  if condition.search(path.read_text()))


def syntax_check(unit: str, macro: str, include_dirs: list[Path]) -> subprocess.CompletedProcess:
    """Compiles csrc/<unit> with -fsyntax-only, -D<macro> and the flags setup.py builds
    libms_aten.so with: its CXXFLAGS, BuildExtension's extension macro, csrc/ and the backend's
    headers before torch's, and the C++ ABI torch was built with."""
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    command = [COMPILER, *setup_constant("CXXFLAGS"), "-fsyntax-only", f"-D{macro}",
               "-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
               f"-I{CSRC}", *(f"-I{d}" for d in include_dirs),
               *(f"-I{p}" for p in include_paths()), str(CSRC / unit)]
    return subprocess.run(command, capture_output=True, text=True)


def torch_npu_version() -> str:
    """The torch_npu release for this torch: torch_npu's versions follow torch's (2.13.0)."""
    return torch.__version__.split("+")[0]


def torch_npu_include_dirs(cache: Path) -> list[Path]:
    """setup.py's include dirs for the torch_npu wheel that matches this torch, whose headers
    are downloaded (pip download, never installed: importing torch_npu needs Ascend's CANN
    libraries) and unpacked under `cache` on first use. Skips the calling test when the wheel
    cannot be downloaded."""
    version = torch_npu_version()
    package = cache / f"torch_npu-{version}"
    if not (package / "torch_npu" / "include").is_dir():
        _fetch_headers(version, package)
    return [package / "torch_npu" / d for d in setup_constant("NPU_INCLUDE_DIRS")]


def _fetch_headers(version: str, package: Path) -> None:
    """Unpacks torch_npu/include/ of the torch-npu==`version` wheel into `package`."""
    with tempfile.TemporaryDirectory(dir=package.parent) as scratch:
        # --no-cache-dir: the headers kept under `cache` are the only copy this leaves.
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--no-cache-dir", "--quiet", f"torch-npu=={version}", "--dest", scratch],
            capture_output=True, text=True)
        wheels = list(Path(scratch).glob("torch_npu-*.whl"))
        if result.returncode != 0 or not wheels:
            reason = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
            pytest.skip(f"the torch-npu=={version} wheel is unavailable: {reason}")
        staged = Path(scratch) / "unpacked"
        with zipfile.ZipFile(wheels[0]) as wheel:  # a wheel is a zip archive
            headers = [name for name in wheel.namelist() if name.startswith("torch_npu/include/")]
            assert headers, f"{wheels[0].name} has no torch_npu/include/"
            wheel.extractall(staged, headers)
        # Renamed into place whole, so an interrupted fetch leaves nothing half-unpacked.
        staged.rename(package)
