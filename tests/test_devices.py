"""Device selection and mismatch handling; compile checks of the CUDA and NPU units against
their backends' headers; GPU tests if a GPU."""
from __future__ import annotations

import ctypes
import mmap
import shutil
import subprocess
from pathlib import Path

import device_units
import numpy as np
import pytest
import torch
from test_c_boundary import ABS, launch

import ms_aten
from ms_aten.native import library

from common import assert_same, run, to_ms

ROOT = Path(__file__).resolve().parents[1]
X = torch.randn(3, 4)
HAS_CUDA_BUILD = bool(library.load().ms_aten_supports(b"GPU"))


def test_set_device_cpu_runs_the_cpu_kernel(mode):
    op = ms_aten.op("leaky_relu", negative_slope=0.3).set_device("CPU")
    assert op.attrs["primitive_target"] == "CPU"
    assert op.attrs["func_name"].endswith("libms_aten.so:MsAtenCall")
    assert_same(run(op, (to_ms(X),), mode), torch.nn.functional.leaky_relu(X, 0.3))


@pytest.mark.skipif(HAS_CUDA_BUILD, reason="this build has CUDA")
def test_gpu_request_on_a_cpu_build_fails_before_launch_and_cpu_keeps_working(mode):
    op = ms_aten.op("relu")
    with pytest.raises(RuntimeError, match=r"built without CUDA support.*set_device\('CPU'\)"):
        op.set_device("GPU")
    with pytest.raises(RuntimeError, match=r"built without Ascend NPU support"):
        op.set_device("Ascend")
    assert op.attrs["func_name"].endswith(":MsAtenCall")  # unchanged by the failed requests
    assert_same(run(op, (to_ms(X),), mode), X.relu())


def test_unknown_device_target_is_a_value_error():
    with pytest.raises(ValueError, match=r"unknown device target 'TPU'"):
        ms_aten.op("relu").set_device("TPU")


def test_device_pointer_handed_to_the_cpu_kernel_is_an_error_not_a_crash():
    # An address no host mapping covers, as a device pointer would be: map a page, unmap it.
    page = mmap.mmap(-1, mmap.PAGESIZE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    del page  # unmapped now (nothing else references the buffer)
    fake = np.ndarray((4,), np.float32, buffer=(ctypes.c_char * 16).from_address(address))
    out = np.zeros(4, np.float32)
    message = launch(ABS, [fake, out])
    assert "buffer 0 at" in message and "is not host memory" in message


CUDA_HEADERS = Path("/usr/local/cuda/include/cuda_runtime_api.h")
NO_COMPILER = shutil.which(device_units.COMPILER) is None


def test_the_compile_checks_find_the_device_units():
    # The checks below compile what units_with finds; a backend unit it missed goes unchecked.
    assert {"device/cpu.cpp", "device/cuda.cpp"} <= set(device_units.units_with("WITH_CUDA"))
    assert {"boundary/ms_ext.cpp", "device/npu.cpp"} <= set(device_units.units_with("WITH_NPU"))


@pytest.mark.skipif(not CUDA_HEADERS.exists() or NO_COMPILER,
                    reason="no CUDA toolkit headers, or no C++ compiler")
@pytest.mark.parametrize("unit", device_units.units_with("WITH_CUDA"))
def test_cuda_units_compile_against_torch_and_cuda_headers(unit, tmp_path):
    # The CPU wheel of torch lacks one generated header of c10/cuda; it holds a single macro.
    shim = tmp_path / "c10" / "cuda" / "impl"
    shim.mkdir(parents=True)
    (shim / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    result = device_units.syntax_check(unit, "WITH_CUDA", [CUDA_HEADERS.parent, tmp_path])
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def torch_npu_headers(request, tmp_path_factory) -> list[Path]:
    """The include dirs of the torch_npu wheel for this torch, unpacked once into pytest's cache
    (.pytest_cache/, which `pytest --cache-clear` empties), so later runs need no network."""
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    folder = (cache.mkdir("torch_npu_headers") if cache is not None
              else tmp_path_factory.mktemp("torch_npu_headers"))
    return device_units.torch_npu_include_dirs(folder)


# boundary/ms_ext.cpp wraps MindSpore's buffers with at_npu::native::from_blob on a PrivateUse1
# device; device/npu.cpp orders ATen's stream against MindSpore's with ACL events.
@pytest.mark.skipif(NO_COMPILER, reason="no C++ compiler")
@pytest.mark.parametrize("unit", device_units.units_with("WITH_NPU"))
def test_npu_units_compile_against_torch_npu_headers(unit, torch_npu_headers):
    result = device_units.syntax_check(unit, "WITH_NPU", torch_npu_headers)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(not (HAS_CUDA_BUILD and torch.cuda.is_available()),
                    reason="needs a CUDA build of ms_aten, a GPU and MindSpore's GPU runtime")
def test_gpu_demo_matches_torch_on_gpu():
    # MindSpore fixes its device once per process: run the GPU demo in a fresh one.
    result = subprocess.run(["bash", str(ROOT / "scripts" / "run_gpu.sh")], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "GPU_GRAPH_MODE" in result.stdout and "CPU_OP_IN_GPU_CONTEXT" in result.stdout
