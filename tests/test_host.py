"""ms_aten asks for MindSpore's blocking host run and OpenMP's active wait policy on the CPU
(ms_aten/native/host.py), unless the user chose; checked in fresh processes, since MindSpore and
libgomp read their variables once."""
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


# torch's libgomp reads OMP_WAIT_POLICY when `import torch` loads it, so ms_aten sets it only
# when it comes first; afterwards setting it would change nothing.
@pytest.mark.parametrize("script, given, expected", [
    ("import os, ms_aten", None, "active"),
    ("import os, ms_aten", "passive", "passive"),
    ("import os, torch, ms_aten", None, "None"),
])
def test_import_asks_for_openmp_s_active_wait_before_torch_loads_libgomp(script, given, expected):
    printed = last_line_of(f"{script}; print(os.environ.get('OMP_WAIT_POLICY'))",
                           "OMP_WAIT_POLICY", given)
    assert printed == expected
