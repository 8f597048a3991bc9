#!/usr/bin/env bash
# Installs what the project needs and builds the extension in place, next to
# the Python package (run things from the repository root, or put it on
# PYTHONPATH)
# (CUDA kernels when nvcc is found, CPU-only otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q "torch==2.14.1" numpy pytest ninja "setuptools>=64" wheel
# cuobjdump, for the test that the build holds code for every arch it lists.
python3 -m pip install -q --no-deps "nvidia-cuda-cuobjdump==13.5.37"
# CUTLASS's headers for the Hopper kernels (only the headers are used).
python3 -m pip install -q --no-deps "nvidia-cutlass==4.2.0.0"
MAX_JOBS="${MAX_JOBS:-$(nproc)}" python3 setup.py -q build_ext --inplace
