#!/usr/bin/env bash
# Creates .venv/ in the repo root (if missing), installs the pinned packages, and builds and
# installs ms_aten (editable) with pip: the bridge library and the PYNATIVE fast-path module.
# A second run that finds everything in place only compares two stamps and returns in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

# The pins: torch==2.13.0 is the CPU wheel on disk (any other version pulls a CUDA build);
# numpy<2 because MindSpore 2.10's PyNative arithmetic fails with numpy 2.
# pytest-xdist: scripts/test.sh runs the test files in parallel processes.
# ruff, mypy, import-linter, clang-format, mkdocs (+ mkdocstrings for the API page):
# scripts/lint.sh (pinned: a new release must not fail CI on old code).
REQUIREMENTS=(mindspore==2.10.0 torch==2.13.0 "numpy<2" pytest pytest-xdist==3.8.0 expecttest
  ninja matplotlib
  ruff==0.17.6 mypy==2.4.1 import-linter==2.16 clang-format==23.1.5 mkdocs==1.6.1
  mkdocstrings==1.0.8 mkdocstrings-python==2.0.11)
# Test-only: Hugging Face models for the model tests. transformers goes in without its
# dependencies so that it cannot move torch or numpy; these are the ones it needs to import.
TRANSFORMERS=transformers==5.23.0
TRANSFORMERS_DEPS=("tokenizers>=0.23.1,<0.24" "huggingface_hub>=1.31,<3" "safetensors>=0.8"
  "regex>=2025.10.22" "pyyaml>=5.1" "tqdm>=4.60" "packaging>=20")

if [ ! -x "$PY" ]; then
  echo "[setup] creating $VENV"
  python3 -m venv "$VENV"
fi

deps_stamp="$VENV/.ms_aten_deps"
deps_want=$(printf '%s\n' "${REQUIREMENTS[@]}" "$TRANSFORMERS" "${TRANSFORMERS_DEPS[@]}" \
  | sha1sum | cut -d' ' -f1)
if [ "$(cat "$deps_stamp" 2>/dev/null)" != "$deps_want" ]; then
  echo "[setup] installing ${REQUIREMENTS[*]} $TRANSFORMERS"
  start=$(date +%s)
  "$PY" -m pip install --quiet --upgrade pip
  "$PY" -m pip install --quiet "${REQUIREMENTS[@]}"
  "$PY" -m pip install --quiet "${TRANSFORMERS_DEPS[@]}"
  "$PY" -m pip install --quiet --no-deps "$TRANSFORMERS"
  echo "$deps_want" > "$deps_stamp"
  echo "[setup] packages installed in $(( $(date +%s) - start )) s"
fi

# Rebuild when any C++ source, the build scripts or the torch version changed. pip keeps the
# objects in build/ (see setup.py), so ninja recompiles only what changed.
build_stamp="$VENV/.ms_aten_build"
build_want=$( (cat setup.py pyproject.toml $(find csrc -name "*.h" -o -name "*.cpp" | sort) \
  ms_aten/native/pyboost_build.py; "$PY" -c "import torch; print(torch.__version__)") \
  | sha1sum | cut -d' ' -f1)
if [ "$(cat "$build_stamp" 2>/dev/null)" != "$build_want" ] || [ ! -f ms_aten/libms_aten.so ] \
    || [ ! -f ms_aten/ms_aten_fast_path.so ]; then
  echo "[setup] building ms_aten (libms_aten.so and the fast-path module)"
  start=$(date +%s)
  # No build isolation: both libraries link against the torch and MindSpore in this venv.
  MAX_JOBS=${MAX_JOBS:-2} "$PY" -m pip install --quiet --no-build-isolation --no-deps -e .
  echo "$build_want" > "$build_stamp"
  echo "[setup] ms_aten built in $(( $(date +%s) - start )) s"
fi

"$PY" - <<'PY'
import mindspore, numpy, torch, transformers
import ms_aten
from ms_aten.native import pyboost
if not pyboost.available():
    raise SystemExit(f"[setup] the fast-path module {pyboost.MODULE_PATH} does not load")
print(f"[setup] python ok: mindspore {mindspore.__version__}, torch {torch.__version__}, "
      f"numpy {numpy.__version__}, transformers {transformers.__version__}, "
      f"ms_aten {ms_aten.__version__} with the PYNATIVE fast path")
PY
