#!/usr/bin/env bash
# Creates .venv/ in the repo root (if missing), installs the pinned packages, and builds and
# installs ms_aten (the bridge library included). A second run that finds everything in
# place only compares two stamps and returns in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

# The pins: torch==2.13.0 is the CPU wheel on disk (any other version pulls a CUDA build);
# numpy<2 because MindSpore 2.10's PyNative arithmetic fails with numpy 2.
# ruff, mypy: scripts/lint.sh (pinned so that a new release cannot fail CI on old code).
REQUIREMENTS=(mindspore==2.10.0 torch==2.13.0 "numpy<2" pytest expecttest ninja matplotlib
  ruff==0.17.6 mypy==2.4.1)

if [ ! -x "$PY" ]; then
  echo "[setup] creating $VENV"
  python3 -m venv "$VENV"
fi

deps_stamp="$VENV/.ms_aten_deps"
deps_want=$(printf '%s\n' "${REQUIREMENTS[@]}" | sha1sum | cut -d' ' -f1)
if [ "$(cat "$deps_stamp" 2>/dev/null)" != "$deps_want" ]; then
  echo "[setup] installing ${REQUIREMENTS[*]}"
  start=$(date +%s)
  "$PY" -m pip install --quiet --upgrade pip
  "$PY" -m pip install --quiet "${REQUIREMENTS[@]}"
  echo "$deps_want" > "$deps_stamp"
  echo "[setup] packages installed in $(( $(date +%s) - start )) s"
fi

# Rebuild when any C++ source, the build script or the torch version changed.
build_stamp="$VENV/.ms_aten_build"
build_want=$( (cat setup.py csrc/*.h csrc/*.cpp csrc/*/*.cpp ms_aten/fast_path.py; \
  "$PY" -c "import torch; print(torch.__version__)") \
  | sha1sum | cut -d' ' -f1)
if [ "$(cat "$build_stamp" 2>/dev/null)" != "$build_want" ] || [ ! -f ms_aten/libms_aten.so ]; then
  echo "[setup] building ms_aten (libms_aten.so)"
  start=$(date +%s)
  if "$PY" -m pip show --quiet ms_aten >/dev/null 2>&1 && [ -d build ]; then
    # Installed (editable) already: rebuild in place; ninja recompiles only what changed.
    MAX_JOBS=${MAX_JOBS:-2} "$PY" setup.py --quiet build_ext --inplace
  else
    # No build isolation: the library's rpath must point at the torch in this venv.
    MAX_JOBS=${MAX_JOBS:-2} "$PY" -m pip install --quiet --no-build-isolation --no-deps -e .
  fi
  # The PYNATIVE fast path: a MindSpore CustomOpBuilder module over libms_aten.so. A build
  # killed half-way leaves a lock that would make the next one wait forever.
  rm -f ms_aten/_fast_path_build/build.lock
  "$PY" -c "import sys; from ms_aten import fast_path; sys.exit(fast_path.main())"
  echo "$build_want" > "$build_stamp"
  echo "[setup] ms_aten built in $(( $(date +%s) - start )) s"
fi

"$PY" - <<'PY'
import mindspore, numpy, torch
import ms_aten
print(f"[setup] python ok: mindspore {mindspore.__version__}, torch {torch.__version__}, "
      f"numpy {numpy.__version__}, ms_aten {ms_aten.__version__}")
PY
