#!/usr/bin/env bash
# The GPU demo. Needs an NVIDIA GPU, MindSpore's GPU runtime (CUDA 11.x for MindSpore 2.10) and
# ms_aten built next to a CUDA torch; where any is missing it says which, and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
missing() { echo "run_gpu.sh: $1" >&2; exit 1; }

command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 \
  || missing "no NVIDIA GPU found (nvidia-smi -L failed); use scripts/run_cpu.sh"
"$PY" -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)" \
  || missing "torch in .venv is a CPU build; install a CUDA torch, then rerun scripts/setup.sh"
"$PY" -c "import ms_aten, sys; sys.exit(0 if ms_aten.native.library.load().ms_aten_supports(b'GPU') else 1)" \
  || missing "ms_aten was built without CUDA; rebuild with MS_ATEN_WITH_CUDA=1 bash scripts/setup.sh"
"$PY" -c "import mindspore as ms; ms.set_device('GPU'); ms.Tensor([1.0]) + 1" >/dev/null 2>&1 \
  || missing "MindSpore's GPU runtime does not start (MindSpore 2.10 needs CUDA 11.x)"
exec "$PY" examples/demo_gpu.py
