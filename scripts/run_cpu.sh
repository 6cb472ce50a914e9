#!/usr/bin/env bash
# The demo: ATen's leaky_relu as a MindSpore op, GRAPH and PYNATIVE mode, next to torch.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/demo.py
