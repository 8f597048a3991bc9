#!/usr/bin/env bash
# Sets up from a fresh clone and runs the tests (CUDA tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# From tests/, so that the installed package is the one imported, not the
# in-place build in the repository root.
cd tests
python3 -c "import torch_gemm_act; print('testing the package at', torch_gemm_act.__path__[0])"
python3 -m pytest -q . "$@"
