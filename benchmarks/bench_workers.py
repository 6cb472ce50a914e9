"""Starting a benchmark worker in a fresh process and reading its result: the one stdout line
that starts with RESULT, JSON after it. Imports neither torch nor MindSpore."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

RESULT = "RESULT "
TIMEOUT_S = 3600


def emit(result: dict) -> None:
    """A worker's last word: its result, as the line run() reads."""
    print(RESULT + json.dumps(result), flush=True)


def run(script: Path, arguments: list[str], env: dict[str, str] | None = None) -> dict:
    """`script` with `arguments` in a fresh Python process (`env` added to this one's
    environment, and GLOG_v=3: MindSpore logs errors only); its result. A failing worker stops
    the run with its output."""
    done = subprocess.run([sys.executable, str(script), *arguments], cwd=script.parent,
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=dict(os.environ, GLOG_v="3", **(env or {})))
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{script.name} {' '.join(arguments)} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(lines[-1][len(RESULT):])
