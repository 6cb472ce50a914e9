"""Builds ms_aten: its bridge library, ms_aten/libms_aten.so, and the PYNATIVE fast-path module.

The library is one plain shared object (not a Python extension module): MindSpore dlopens it
by path for ops.Custom(func_type="aot"), and users' own kernels link against it. The fast-path
module (csrc/pyboost/fast_path.cpp, a MindSpore CustomOpBuilder module) links against it and
lands beside it. Build with `pip install --no-build-isolation .` so that both link against the
torch and MindSpore the package will run with. Metadata is in pyproject.toml.
"""
import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).parent
CSRC = ROOT / "csrc"
TORCH_LIB = Path(torch.__file__).parent / "lib"
CXXFLAGS = ["-O2", "-g0", "-std=c++20", "-fvisibility=hidden"]
# torch_npu's headers, relative to its package: its own, then the ACL headers it ships.
NPU_INCLUDE_DIRS = ["include", "include/third_party/acl/inc"]

# The C++ that talks to torch, by layer (csrc/README.md); boundary/extra_abi0.cpp is compiled
# apart (see MsAtenBuild).
TORCH_SOURCES = ["boundary/entry.cpp", "boundary/ms_ext.cpp",
                 "launch/kernel.cpp", "launch/launch_thread.cpp", "launch/launch_allocator.cpp",
                 "launch/view_cache.cpp",
                 "program/program.cpp", "program/family.cpp", "program/scalars.cpp",
                 "program/saved.cpp", "program/compiled.cpp",
                 "op/spec.cpp", "op/results.cpp", "op/grad.cpp", "op/infer.cpp", "op/bounded.cpp",
                 "op/mutate.cpp",
                 "device/cpu.cpp", "device/cuda.cpp", "device/npu.cpp"]


def device_options() -> tuple[list[str], list[str], list[str], list[str]]:
    """(macros, include dirs, library dirs, libraries) for the device backends this torch has.

    As pytorch_scatter does: CUDA code is compiled only when torch was built with CUDA and the
    toolkit is present (MS_ATEN_WITH_CUDA=0/1 overrides); NPU code only when torch_npu imports.
    """
    macros, includes, library_dirs, libraries = [], [], [], []
    from torch.utils.cpp_extension import CUDA_HOME

    want_cuda = os.environ.get("MS_ATEN_WITH_CUDA")
    if want_cuda == "1" or (want_cuda is None and torch.version.cuda and CUDA_HOME):
        macros.append("-DWITH_CUDA")
        includes.append(os.path.join(CUDA_HOME, "include"))
        library_dirs.append(os.path.join(CUDA_HOME, "lib64"))
        libraries += ["c10_cuda", "torch_cuda", "cudart"]
    if importlib.util.find_spec("torch_npu") is not None:
        npu_root = Path(importlib.util.find_spec("torch_npu").origin).parent
        macros.append("-DWITH_NPU")
        includes += [str(npu_root / d) for d in NPU_INCLUDE_DIRS]
        library_dirs.append(str(npu_root / "lib"))
        libraries += ["torch_npu", "ascendcl"]
    return macros, includes, library_dirs, libraries


DEVICE_MACROS, DEVICE_INCLUDES, DEVICE_LIBRARY_DIRS, DEVICE_LIBRARIES = device_options()


def pyboost_build() -> ModuleType:
    """ms_aten/native/pyboost_build.py, loaded by path: the package cannot be imported yet."""
    spec = importlib.util.spec_from_file_location(
        "ms_aten_pyboost_build", ROOT / "ms_aten" / "native" / "pyboost_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAST_PATH = pyboost_build()


class MsAtenBuild(BuildExtension):
    """BuildExtension plus the old-ABI unit, the plain .so name, and the fast-path module."""

    def finalize_options(self) -> None:
        super().finalize_options()
        # Objects live in the tree's build/ for every kind of build (in place, editable, wheel;
        # pip gives editable builds a fresh temporary directory), so ninja recompiles only the
        # sources that changed.
        self.build_temp = str(
            ROOT / "build" / f"temp.{sysconfig.get_platform()}-{sys.implementation.cache_tag}")

    def get_ext_filename(self, fullname: str) -> str:
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext) -> None:
        # MindSpore's AotExtra uses the pre-C++11 std::string ABI; torch's flags would add
        # -D_GLIBCXX_USE_CXX11_ABI=1, so this unit goes through a compiler torch never patched.
        from setuptools._distutils.ccompiler import new_compiler
        from setuptools._distutils.sysconfig import customize_compiler

        compiler = new_compiler()
        customize_compiler(compiler)
        objects = compiler.compile(
            [str(CSRC / "boundary" / "extra_abi0.cpp")],
            output_dir=self.build_temp,
            include_dirs=[str(CSRC)],
            extra_postargs=["-fPIC", "-O2", "-std=c++17", "-fvisibility=hidden",
                            "-D_GLIBCXX_USE_CXX11_ABI=0"],
        )
        ext.extra_objects = list(objects)
        super().build_extension(ext)

    def build_extensions(self) -> None:
        super().build_extensions()
        # After the bridge library: the fast-path module links against it, in build_lib.
        library = Path(self.build_lib) / "ms_aten" / "libms_aten.so"
        FAST_PATH.build(CSRC, library, self._fast_path_output(self.build_lib),
                        Path(self.build_temp) / "fast_path")

    def _fast_path_output(self, package_root: str) -> Path:
        return Path(package_root) / "ms_aten" / FAST_PATH.MODULE_FILE

    def copy_extensions_to_source(self) -> None:  # --inplace and editable installs
        super().copy_extensions_to_source()
        FAST_PATH.install(self._fast_path_output(self.build_lib), self._fast_path_output(str(ROOT)))

    def get_outputs(self) -> list[str]:
        return [*super().get_outputs(), str(self._fast_path_output(self.build_lib))]

    def get_output_mapping(self) -> dict[str, str]:
        mapping = super().get_output_mapping()
        if self.inplace:
            mapping[str(self._fast_path_output(self.build_lib))] = str(
                self._fast_path_output(str(ROOT)))
        return mapping


# The public header ships inside the package for `python -m ms_aten.build`.
(ROOT / "ms_aten" / "include").mkdir(exist_ok=True)
shutil.copy2(CSRC / "boundary" / "ms_ext.h", ROOT / "ms_aten" / "include" / "ms_ext.h")


bridge = CppExtension(
    name="ms_aten.libms_aten",
    sources=[str(Path("csrc") / s) for s in TORCH_SOURCES],
    include_dirs=[str(CSRC), *DEVICE_INCLUDES],
    library_dirs=DEVICE_LIBRARY_DIRS,
    libraries=DEVICE_LIBRARIES,
    extra_compile_args={"cxx": CXXFLAGS + DEVICE_MACROS},
    extra_link_args=[
        "-Wl,-soname,libms_aten.so",
        # Installed next to torch, or (editable install) wherever torch was at build time.
        "-Wl,-rpath,$ORIGIN/../torch/lib",
        f"-Wl,-rpath,{TORCH_LIB}",
        *(f"-Wl,-rpath,{d}" for d in DEVICE_LIBRARY_DIRS),
    ],
)

setup(
    ext_modules=[bridge],
    cmdclass={"build_ext": MsAtenBuild.with_options(use_ninja=True)},
)
