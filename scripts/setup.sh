#!/usr/bin/env bash
# Installs what the project needs, builds the extension in place, next to the
# Python package (run things from the repository root, or put it on
# PYTHONPATH), and installs the package (CUDA kernels when nvcc is found,
# CPU-only otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q "torch==2.14.1" numpy pytest ninja "setuptools>=64" wheel
# cuobjdump, for the test that the build holds code for every arch it lists.
python3 -m pip install -q --no-deps "nvidia-cuda-cuobjdump==13.5.37"
# The model libraries fuse_linear_act is tested on (tests/test_fuse_models.py):
# torchvision the release built for this torch, and it and timm without their
# dependencies, so that pip never swaps torch.
python3 -m pip install -q "transformers==5.24.0" pillow
python3 -m pip install -q --no-deps "torchvision==0.29.1" "timm==1.0.31"
# CUTLASS's headers for the tensor-core kernels (only the headers are used).
python3 -m pip install -q --no-deps "nvidia-cutlass==4.2.0.0"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
python3 setup.py -q build_ext --inplace
# And installed as a package, as `pip install --no-build-isolation .` does for a
# user: the tests run against this copy (scripts/test.sh). It reuses the
# objects the in-place build left in build/.
python3 -m pip install -q --no-build-isolation --no-deps .
