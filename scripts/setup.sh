#!/usr/bin/env bash
# Sets up a fresh machine for fsdp-orch's own tests: a virtual environment in .venv with the project
# (editable), the runtime, the test tools, and the CPU build of torch 2.13.0 that the tests run the
# ranks on. fsdp-orch itself needs no torch (its runtime extra asks torch>=2.9, never a pin); a
# user installs it with pipx or pip beside the torch their training has.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --no-cache-dir --upgrade pip
# The CPU build: this machine's pip configuration has its wheel (find-links /opt/wheels, version
# 2.13.0+cpu); elsewhere it comes from PyTorch's CPU index (PyPI's torch 2.13.0 is the CUDA build,
# 527 MB plus about 2.2 GB of nvidia packages).
# --no-compile, then one compileall over both cores: pip compiles each package's .py files in one
# process, which was most of the set-up's minute (torch alone: 34 s, 11 s without). The same .pyc
# files, written once here: the suite's processes never compile torch's modules again.
if ! .venv/bin/python -m pip install --quiet --no-cache-dir --no-compile "torch==2.13.0+cpu" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet --no-cache-dir --no-compile \
    --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0+cpu"
fi
.venv/bin/python -m pip install --quiet --no-cache-dir --no-compile -e ".[runtime,test,accelerate,hf]"
.venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
echo "fsdp-orch is set up in $(pwd)/.venv"
