"""ms_aten asks for MindSpore's blocking host run on the CPU (ms_aten/native/host.py), unless the
user chose; checked in fresh processes, since MindSpore reads the variable once."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = "import os, ms_aten; print(os.environ.get('MS_DEV_HOST_BLOCKING_RUN'))"


@pytest.mark.parametrize("given, expected", [(None, "1"), ("0", "0"), ("1", "1")])
def test_import_asks_for_the_blocking_host_run_unless_the_user_chose(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "MS_DEV_HOST_BLOCKING_RUN"}
    if given is not None:
        env["MS_DEV_HOST_BLOCKING_RUN"] = given
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected
