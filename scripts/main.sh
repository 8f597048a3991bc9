#!/usr/bin/env bash
# Sets up from a fresh clone and runs the main job: the benchmark table and
# then the model-level benchmark on a GPU, or, on a CPU-only machine, the
# demo that trains an MLP both ways.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  python3 bench/bench.py "$@"
  python3 bench/models.py
else
  python3 scripts/demo.py "$@"
fi
