"""The seed workflow: ms_aten.op('leaky_relu'), a user kernel built with ms_aten.build, dtypes."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from mindspore import ops

import ms_aten
from ms_aten import build as ms_build
from ms_aten.native import dtypes, library
from ms_aten.native.dtypes import TORCH_TO_MS

from common import assert_same, run, to_ms

ROOT = Path(__file__).resolve().parents[1]
SEED_INPUT = torch.tensor([[0.0, -0.1], [-0.2, 1.0]])
SEED_OUTPUT = torch.tensor([[0.0, -0.001], [-0.002, 1.0]])


def test_seed_example_through_ms_aten_op(mode):
    assert_same(run(ms_aten.op("leaky_relu"), (to_ms(SEED_INPUT),), mode), SEED_OUTPUT)


@pytest.fixture(scope="module")
def seed_kernel(tmp_path_factory) -> Path:
    """csrc/examples/leaky_relu.cpp, built the way a user would (about 45 s)."""
    out = tmp_path_factory.mktemp("kernel") / "leaky_relu_cpu.so"
    subprocess.run([sys.executable, "-m", "ms_aten.build",
                    str(ROOT / "csrc/examples/leaky_relu.cpp"), "-o", str(out)], check=True)
    return out


@pytest.mark.slow  # compiles a kernel
def test_user_kernel_built_with_ms_aten_build(mode, seed_kernel):
    op = ops.Custom(f"{seed_kernel}:LeakyRelu", out_shape=lambda x: x, out_dtype=lambda x: x,
                    func_type="aot")
    assert_same(run(op, (to_ms(SEED_INPUT),), mode), SEED_OUTPUT)


@pytest.mark.slow  # compiles a kernel
def test_user_kernel_loads_without_ld_library_path(seed_kernel):
    # A fresh process with no LD_LIBRARY_PATH: the rpaths and `import ms_aten` are enough.
    script = textwrap.dedent(f"""
        import ms_aten, mindspore as ms
        from mindspore import ops, Tensor
        import numpy as np
        op = ops.Custom("{seed_kernel}:LeakyRelu", out_shape=lambda x: x, out_dtype=lambda x: x,
                        func_type="aot")
        print(op(Tensor(np.array([-1.0, 2.0], np.float32))).asnumpy().tolist())
    """)
    env = {k: v for k, v in __import__("os").environ.items() if k != "LD_LIBRARY_PATH"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[-0.009999999776482582, 2.0]"


@pytest.mark.slow  # compiles a kernel
def test_build_reports_compiler_errors(tmp_path):
    broken = tmp_path / "broken.cpp"
    broken.write_text('#include "ms_ext.h"\nextern "C" int F() { return undefined_name; }\n')
    with pytest.raises(ms_build.BuildError, match=r"undefined_name"):
        ms_build.build(broken, tmp_path / "broken.so")
    assert not (tmp_path / "broken.so").exists()


@pytest.mark.slow  # compiles a kernel
def test_build_never_reuses_a_stale_library(tmp_path):
    source = tmp_path / "answer.cpp"
    output = tmp_path / "answer.so"
    for answer in (1, 2):
        source.write_text(f'extern "C" int Answer() {{ return {answer}; }}\n')
        ms_build.build(source, output)
        # Load a copy: the same path would hit the dynamic loader's cache.
        copy = tmp_path / f"answer{answer}.so"
        copy.write_bytes(output.read_bytes())
        assert __import__("ctypes").CDLL(str(copy)).Answer() == answer


ALL_DTYPES = list(TORCH_TO_MS)


def _sample(dtype: torch.dtype) -> torch.Tensor:
    values = torch.tensor([[0, 1, 5], [7, 3, 2]])
    if dtype.is_complex:
        return (values + 1j * values.flip(0)).to(dtype)
    return values.to(dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_dtype_round_trips(mode, dtype):
    x = _sample(dtype)
    assert_same(run(ms_aten.op("clone"), (to_ms(x),), mode), x)


@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if d not in (torch.bool,)], ids=str)
def test_every_dtype_computes(mode, dtype):
    x = _sample(dtype)
    assert_same(run(ms_aten.op("mul.Tensor"), to_ms((x, x)), mode), x * x)


def test_dtype_table_rejects_unknown_strings():
    lib = library.load()
    assert lib is not None  # the C++ table itself is exercised by every test above
    with pytest.raises(TypeError, match="unsupported dtype"):
        dtypes.to_torch("float32")


def test_float16_and_bfloat16_compute(mode):
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(4, 3).to(dtype)
        assert_same(run(ms_aten.op("gelu"), (to_ms(x),), mode), F.gelu(x))
