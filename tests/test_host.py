"""ms_aten asks for MindSpore's blocking host run on the CPU (ms_aten/native/host.py), unless the
user chose; checked in fresh processes, since MindSpore reads the variable once."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

BLOCKING = "import os, ms_aten; print(os.environ.get('MS_DEV_HOST_BLOCKING_RUN'))"


def last_line_of(script: str, variable: str, given: str | None) -> str:
    """What `script` prints last in a fresh process whose `variable` is `given` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != variable}
    if given is not None:
        env[variable] = given
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("given, expected", [(None, "1"), ("0", "0"), ("1", "1")])
def test_import_asks_for_the_blocking_host_run_unless_the_user_chose(given, expected):
    assert last_line_of(BLOCKING, "MS_DEV_HOST_BLOCKING_RUN", given) == expected
