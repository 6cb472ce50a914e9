"""The wheel, installed: `pip wheel --no-build-isolation .` holds the bridge library and the
fast-path module, and the package works from another directory with no source tree beside it.

The fresh venv gets torch and MindSpore from this interpreter's site-packages through a .pth
file (what --system-site-packages gives where they are installed system-wide): a path listed in
a .pth is not itself scanned for .pth files, so this checkout's editable install stays out.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Runs in the fresh venv: an op in GRAPH mode (inside a Cell) and in PYNATIVE mode (through the
# fast path), each against torch.
CHECK = r"""
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
import torch
from mindspore import nn

import ms_aten
import ms_aten.testing
from ms_aten.native import pyboost
from ms_aten.ops import fast_path

package = Path(ms_aten.__file__).parent
assert package.is_relative_to(sys.prefix), f"ms_aten imported from {package}, not the venv"
assert not (package.parent / "csrc").exists(), "a source tree beside the installed package"
assert pyboost.available(), f"the fast-path module {pyboost.MODULE_PATH} does not load"

x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
want = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
gelu = ms_aten.op("gelu")


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.gelu = gelu

    def construct(self, t):
        return self.gelu(t)


ms.set_context(mode=ms.GRAPH_MODE)
np.testing.assert_allclose(Net()(ms.Tensor(x)).asnumpy(), want, rtol=1e-6, atol=1e-6)
ms.set_context(mode=ms.PYNATIVE_MODE)
np.testing.assert_allclose(gelu(ms.Tensor(x)).asnumpy(), want, rtol=1e-6, atol=1e-6)
assert hasattr(gelu, fast_path.STATE_ATTR), "the PYNATIVE call did not take the fast path"
print("installed ms_aten OK:", package)
"""


def run(command: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    # Without PYTHONPATH: a checkout on it would shadow the installed package (pip included).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=cwd, env=env)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.slow
def test_wheel_installs_and_runs_from_anywhere(tmp_path):
    # pip builds in the tree's build/, where ninja finds the objects of earlier builds.
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--quiet",
         "-w", str(tmp_path / "dist"), str(ROOT)])
    (wheel,) = (tmp_path / "dist").glob("ms_aten-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("libms_aten.so", "ms_aten_fast_path.so", "include/ms_ext.h", "_version.py",
                 "testing/__init__.py", "testing/opinfo.py"):
        assert f"ms_aten/{name}" in names, f"{name} is not in {wheel.name}"

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run([str(python), "-c", purelib]).stdout.strip())
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet",
         str(wheel)])
    # After the install: pip would take this interpreter's (editable) ms_aten for the wheel's.
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "check.py").write_text(CHECK)  # GRAPH mode compiles from source files only
    result = run([str(python), "check.py"], cwd=elsewhere)
    assert "installed ms_aten OK" in result.stdout
