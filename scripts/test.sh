#!/usr/bin/env bash
# Sets up from a fresh clone and runs the tests (CUDA tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m pytest -q tests "$@"
