#!/usr/bin/env bash
# Prepares the cases scripts/gpu_check.sh runs on a GPU machine, here where ms_aten (and so
# MindSpore) runs: the op specs and GPT-2 tiny's program with torch's reference outputs
# (tests/aot_launcher/make_cases.py), and GPT-2 small's program for the benchmark, without its
# weights, which the GPU machine makes from a seed (tests/aot_launcher/bench.py). Checks that
# they fit what is carried to the machine (64 MiB in all; the cases stay under 16 MiB).
#
# Usage: bash scripts/gpu_prepare.sh [CASES]     CASES defaults to build/aot_cases
#        BENCHMARK=tiny bash scripts/gpu_prepare.sh ...   a GPT-2 tiny benchmark (seconds)
# Then, on the GPU machine, with CASES carried: bash scripts/gpu_check.sh [CASES]
set -euo pipefail
CASES=${1:+$(realpath -m "$1")}  # a path given is the caller's; the default, the repository's
cd "$(dirname "$0")/.."
CASES=${CASES:-$(pwd)/build/aot_cases}
LIMIT_MB=16
start=$(date +%s)
rm -rf "$CASES"
(cd tests && ../.venv/bin/python -m aot_launcher.make_cases "$CASES" \
  --benchmark "${BENCHMARK:-small}")
kb=$(du -sk "$CASES" | cut -f1)
if [ "$kb" -gt $(( LIMIT_MB * 1024 )) ]; then
  echo "[gpu_prepare] $CASES holds $(( kb / 1024 )) MiB, over $LIMIT_MB MiB" >&2
  exit 1
fi
echo "[gpu_prepare] $CASES: $(find "$CASES" -type f | wc -l) files, $kb KiB, in $(( $(date +%s) - start )) s"
echo "[gpu_prepare] on the GPU machine, with ${CASES#"$(pwd)/"} carried: bash scripts/gpu_check.sh ${CASES#"$(pwd)/"}"
