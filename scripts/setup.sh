#!/usr/bin/env bash
# Sets up a fresh machine for fsdp-orch: a virtual environment in .venv with the project,
# the CPU wheel of torch (pinned: an unpinned torch pulls several GB of CUDA wheels) and the test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --no-cache-dir --upgrade pip
.venv/bin/python -m pip install --quiet --no-cache-dir "torch==2.13.0" numpy
.venv/bin/python -m pip install --quiet --no-cache-dir -e ".[test,accelerate,hf]"
echo "fsdp-orch is set up in $(pwd)/.venv"
