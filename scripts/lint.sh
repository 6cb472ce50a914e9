#!/usr/bin/env bash
# Lint and type check with the tools scripts/setup.sh installs into .venv (config in
# pyproject.toml and .clang-format): ruff over the Python sources, mypy over ms_aten/, the layer
# contracts (import-linter), clang-format over the C++ sources (a check: `clang-format -i`
# applies it).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
echo "[lint] $("$BIN/ruff" --version), $("$BIN/mypy" --version), $("$BIN/clang-format" --version)"
"$BIN/ruff" check .
"$BIN/mypy"
"$BIN/lint-imports" --no-cache
git ls-files -- 'csrc/*.h' 'csrc/*.cpp' 'csrc/*.cu' 'benchmarks/*.cpp' 'examples/*.cpp' 'tests/*.cpp' \
  | xargs "$BIN/clang-format" --style=file --dry-run --Werror
