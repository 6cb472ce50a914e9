#!/usr/bin/env bash
# Lint and type check with the tools scripts/setup.sh installs into .venv (config in
# pyproject.toml): ruff over the Python sources, mypy over ms_aten/.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
echo "[lint] $("$BIN/ruff" --version), $("$BIN/mypy" --version)"
"$BIN/ruff" check .
"$BIN/mypy"
