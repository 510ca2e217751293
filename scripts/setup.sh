#!/usr/bin/env bash
# Sets up a fresh machine for fsdp-orch's own tests: a virtual environment in .venv with the project
# (editable), the runtime, the test tools, and the CPU build of torch 2.13.0 that the tests run the
# ranks on. fsdp-orch itself needs no torch (its runtime extra asks torch>=2.9, never a pin); a
# user installs it with pipx or pip beside the torch their training has.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
fresh=
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  fresh=1
fi
.venv/bin/python -m pip install --quiet --no-cache-dir --upgrade pip
# The CPU build: this machine's pip configuration has its wheel (find-links /opt/wheels, version
# 2.13.0+cpu); elsewhere it comes from PyTorch's CPU index (PyPI's torch 2.13.0 is the CUDA build,
# 527 MB plus about 2.2 GB of nvidia packages).
# Into a new environment: --no-compile, then one compileall over every core. pip compiles each
# package's .py files in one process (torch alone: 34 s, 11 s without); the same .pyc files, so the
# suite's processes never compile torch's modules. Into an existing one, pip compiles what it
# changes (a compileall over everything would read every file again: 5 s).
compile=()
[ -n "$fresh" ] && compile=(--no-compile)
if ! .venv/bin/python -m pip install --quiet --no-cache-dir "${compile[@]}" "torch==2.13.0+cpu" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet --no-cache-dir "${compile[@]}" \
    --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0+cpu"
fi
.venv/bin/python -m pip install --quiet --no-cache-dir "${compile[@]}" -e ".[runtime,test,accelerate,hf,kubernetes]"
if [ -n "$fresh" ]; then
  .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
fi
echo "fsdp-orch is set up in $(pwd)/.venv"
