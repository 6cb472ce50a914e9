#!/usr/bin/env bash
# The test suite (installs everything it needs first). Extra arguments go to pytest.
# The test files run in MS_ATEN_TEST_WORKERS processes (default: one per core, at most 4; 1:
# one process): pytest-xdist, each file's tests in one worker, so that a file's shared captures
# are made once. Much of a test is one-threaded Python (capture, graph compiles, imports in
# fresh processes), which a second worker overlaps.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
workers=${MS_ATEN_TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}
parallel=()
if [ "$workers" -gt 1 ]; then
  parallel=(-n "$workers" --dist loadfile)
fi
exec .venv/bin/python -m pytest tests "${parallel[@]}" "$@"
