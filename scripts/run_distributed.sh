#!/usr/bin/env bash
# Data-parallel training on CPU: examples/data_parallel.py in 2 workers under msrun (mccl).
# msrun shows the workers' output; exits non-zero unless the example's checks pass (its OK line).
# Extra arguments go to msrun (e.g. --cluster_time_out=300). MS_ATEN_PYTHON overrides the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MS_ATEN_PYTHON:-}" ]; then
  bash scripts/setup.sh
  MS_ATEN_PYTHON=.venv/bin/python
fi
BIN=$(cd "$(dirname "$MS_ATEN_PYTHON")" && pwd)
# msrun starts each worker as `python <script>`, from PATH.
export PATH="$BIN:$PATH"
LOG_DIR=$(mktemp -d -t ms_aten_msrun.XXXXXX)
PORT=$(python -c "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])")
echo "[run_distributed] $(python --version), msrun on port $PORT, logs in $LOG_DIR"
status=0
"$BIN/msrun" --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 --master_port="$PORT" \
  --log_dir="$LOG_DIR" --join=True --cluster_time_out=120 "$@" examples/data_parallel.py \
  || status=$?
if [ "$status" -ne 0 ] || ! grep -q "^OK" "$LOG_DIR/worker_0.log"; then
  echo "[run_distributed] FAILED (msrun exit status $status)" >&2
  exit 1
fi
