#!/usr/bin/env bash
# Lint and type check with the tools scripts/setup.sh installs into .venv (config in
# pyproject.toml and .clang-format): ruff over the Python sources, mypy over ms_aten/, the layer
# contracts (import-linter), clang-format over the C++ sources (a check: `clang-format -i`
# applies it), and the documentation site (mkdocs.yml: a broken link or a page missing from nav
# fails the strict build; the site goes to a temporary folder, deleted after).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
echo "[lint] $("$BIN/ruff" --version), $("$BIN/mypy" --version), $("$BIN/clang-format" --version)"
echo "[lint] $("$BIN/mkdocs" --version)"
"$BIN/ruff" check .
"$BIN/mypy"
"$BIN/lint-imports" --no-cache
git ls-files -- 'csrc/*.h' 'csrc/*.cpp' 'csrc/*.cu' 'benchmarks/*.cpp' 'examples/*.cpp' 'tests/*.cpp' \
  | xargs "$BIN/clang-format" --style=file --dry-run --Werror
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
"$BIN/mkdocs" build --strict --site-dir "$site"
