#!/usr/bin/env bash
# ms_aten's CUDA backend on a real GPU, without MindSpore. Builds libms_aten.so against this
# machine's CUDA torch (scripts/build_bridge.py) and the AOT launcher (tests/aot_launcher/
# launcher.cpp, which calls the library's entry points as MindSpore's GPU AOT kernel does), then
# runs the launcher's cases (tests/aot_launcher/cases.py) on CUDA buffers on a non-default stream,
# each checked against torch on the GPU, and again under compute-sanitizer's memcheck and
# synccheck; last, the benchmark, GPT-2 small's forward and backward through the launcher against
# torch eager (tests/aot_launcher/bench.py), when the cases hold one. One line per check (PASS or
# FAIL); exit status 1 when one fails.
#
# Needs an NVIDIA GPU, a CUDA build of torch for $PYTHON (default python3), a C++ compiler and the
# CUDA toolkit ($CUDA_HOME, default /usr/local/cuda). No MindSpore and no network: the cases (the
# op specs, GPT-2 tiny's program, torch's reference outputs, GPT-2 small's program for the
# benchmark) are made beforehand where ms_aten runs, by
#     bash scripts/gpu_prepare.sh
# and carried along (build/aot_cases, about 0.6 MB).
#
# Usage: bash scripts/gpu_check.sh [CASES]            CASES defaults to build/aot_cases
#        bash scripts/gpu_check.sh --cpu LIBRARY [CASES]
# --cpu runs the same steps on the CPU with a built libms_aten.so: no GPU, no CUDA build, no
# sanitizer (tests/test_aot_launcher.py runs it). $WORK (default: a new temporary folder) keeps the
# builds and the launcher's files.
# Each step has a time limit (build 180 s, checks 90 s, each sanitizer 100 s, the benchmark, last,
# 120 s), cut to what is left of 7 minutes for the whole run: a rerun fits the same 15-minute
# device budget.
set -uo pipefail
PYTHON=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
DEVICE=cuda
LIBRARY=""
if [ "${1:-}" = "--cpu" ]; then
  DEVICE=cpu
  LIBRARY=$(realpath -m "${2:?--cpu takes the libms_aten.so to run}")
  shift 2
fi
CASES=${1:+$(realpath -m "$1")}  # paths given are the caller's; the rest are the repository's
WORK=$(realpath -m "${WORK:-$(mktemp -d)}")
cd "$(dirname "$0")/.."
CASES=${CASES:-$(pwd)/build/aot_cases}
mkdir -p "$WORK"
LOG="$WORK/checks.log"
START=$(date +%s)
: > "$LOG"

say() { echo "$1" | tee -a "$LOG"; }
# A step's time limit: its own, or what is left of the run's 420 s if less (at least 1 s).
limit() {
  local left=$(( 420 - ($(date +%s) - START) ))
  [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"
}
# A failure before the checks can run: its line, then the summary.
stop() { say "FAIL $1"; summary; }
summary() {
  local passed failed
  passed=$(grep -c '^PASS' "$LOG")
  failed=$(grep -c '^FAIL' "$LOG")
  echo "[gpu_check] $passed passed, $failed failed in $(( $(date +%s) - START )) s ($DEVICE; files in $WORK)"
  [ "$failed" -eq 0 ]
  exit $?
}

[ -f "$CASES/specs.json" ] || stop "cases: no $CASES/specs.json; make them where ms_aten runs: bash scripts/gpu_prepare.sh"
if [ "$DEVICE" = cuda ]; then
  nvidia-smi -L > "$WORK/gpus.txt" 2>&1 || stop "gpu: nvidia-smi -L failed: $(cat "$WORK/gpus.txt")"
  info=$("$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'torch ' + torch.__version__ + ' sees no GPU'; print(f'torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}')" 2>&1) \
    || stop "torch: $(echo "$info" | tail -1)"
  echo "[gpu_check] $info; $(head -1 "$WORK/gpus.txt")"
  [ -f "$CUDA_HOME/include/cuda_runtime_api.h" ] || stop "cuda: no toolkit headers under $CUDA_HOME"
  built=$(date +%s)
  timeout "$(limit 180)" "$PYTHON" scripts/build_bridge.py "$WORK/bridge" --cuda > "$WORK/build.log" 2>&1 \
    || stop "build: libms_aten.so with WITH_CUDA: $(tail -20 "$WORK/build.log")"
  LIBRARY="$WORK/bridge/libms_aten.so"
  say "PASS build: $LIBRARY with WITH_CUDA in $(( $(date +%s) - built )) s, no MindSpore"
  CUDA_FLAGS=(-DWITH_CUDA "-I$CUDA_HOME/include" "-L$CUDA_HOME/lib64" -lcudart "-Wl,-rpath,$CUDA_HOME/lib64")
else
  CUDA_FLAGS=()
fi

"${CXX:-c++}" -std=c++17 -O1 -D_GLIBCXX_USE_CXX11_ABI=0 tests/aot_launcher/launcher.cpp -ldl \
  "${CUDA_FLAGS[@]}" -o "$WORK/launcher" 2> "$WORK/launcher_build.log" \
  || stop "launcher: does not compile: $(head -20 "$WORK/launcher_build.log")"

rm -rf "$WORK/cases" && cp -r "$CASES" "$WORK/cases"
failed_before=$(grep -c '^FAIL' "$LOG")
(cd tests && timeout "$(limit 90)" "$PYTHON" -m aot_launcher.check --device "$DEVICE" \
  --launcher "$WORK/launcher" --library "$LIBRARY" "$WORK/cases") 2>&1 | tee -a "$LOG"
status=${PIPESTATUS[0]}
# check.py exits 1 after printing its FAIL lines; any other failure printed none.
if [ "$status" -ne 0 ] && [ "$(grep -c '^FAIL' "$LOG")" -eq "$failed_before" ]; then
  say "FAIL check: aot_launcher.check ended with exit status $status (its output is above)"
fi


if [ "$DEVICE" = cuda ]; then
  SANITIZER=$(command -v compute-sanitizer || ls "$CUDA_HOME"/bin/compute-sanitizer \
    "$CUDA_HOME"/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
  for tool in memcheck synccheck; do
    if [ -z "$SANITIZER" ]; then
      say "FAIL compute-sanitizer $tool: not found in PATH or under $CUDA_HOME"
      continue
    fi
    # The plan check.py wrote, without the gates (a host function holding the stream); torch's
    # caching allocator off, so that memcheck sees every allocation's bounds.
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "$(limit 100)" "$SANITIZER" --tool "$tool" \
      "$WORK/launcher" --device cuda --no-gate "$LIBRARY" "$WORK/cases/plan.txt" \
      > "$WORK/$tool.log" 2>&1
    status=$?
    errors=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$WORK/$tool.log" | tail -1)
    launches=$(grep -c '^launch ' "$WORK/$tool.log")
    if [ $status -eq 0 ] && [ "$errors" = "ERROR SUMMARY: 0 error" ]; then
      say "PASS compute-sanitizer $tool: 0 errors over $launches launches"
    else
      say "FAIL compute-sanitizer $tool: exit status $status, ${errors:-no summary} ($WORK/$tool.log: $(grep -m3 -E '^=+ (Invalid|Error|Program hit|Barrier|Race)' "$WORK/$tool.log" | tr '\n' ' '))"
    fi
  done
fi

# Last, the benchmark: the checks above come first within the run's time.
failed_before=$(grep -c '^FAIL' "$LOG")
(cd tests && timeout "$(limit 120)" "$PYTHON" -m aot_launcher.bench --device "$DEVICE" \
  --launcher "$WORK/launcher" --library "$LIBRARY" "$WORK/cases") 2>&1 | tee -a "$LOG"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ] && [ "$(grep -c '^FAIL' "$LOG")" -eq "$failed_before" ]; then
  say "FAIL benchmark: aot_launcher.bench ended with exit status $status (its output is above)"
fi
summary
