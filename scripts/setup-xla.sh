#!/usr/bin/env bash
# Makes .venv-xla: the second environment, for the XLA path (torch_xla on its CPU PJRT device).
# The torch pair is in scripts/xla-requirements.txt; fsdp-orch is installed into it (editable,
# without its torch pin). Safe to run twice at once: the second waits for the first, then finds
# the environment made (a stamp holds the requirements it was made from) and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv-xla
exec 9>".venv-xla.lock"
flock 9
stamp="$VENV/.made-from"
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && cmp -s scripts/xla-requirements.txt "$stamp"; then
  echo "the XLA environment is already made in $(pwd)/$VENV"
  exit 0
fi
rm -rf "$VENV"
# The CUDA build of torch 2.9.0 and its nvidia-* wheels take about 7 GB once installed, and as much
# again while pip unpacks them; say so plainly rather than fail half-way with ENOSPC.
free_kb=$(df -Pk . | awk 'NR==2 {print $4}')
if [ "$free_kb" -lt $((10 * 1024 * 1024)) ]; then
  echo "error: scripts/setup-xla.sh needs about 10 GB free for $VENV; $(pwd) has $((free_kb / 1024)) MB" >&2
  exit 1
fi
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --no-cache-dir --upgrade pip
"$VENV/bin/python" -m pip install --quiet --no-cache-dir -r scripts/xla-requirements.txt numpy
# fsdp-orch's own dependencies but torch (its pin is the main environment's 2.13.0).
"$VENV/bin/python" -m pip install --quiet --no-cache-dir pyyaml "jinja2>=3.1" "pydantic>=2.6" "tenacity>=8.2" \
  "croniter>=6.0" "py-spy>=0.3.14" "fabric>=3.2"
"$VENV/bin/python" -m pip install --quiet --no-cache-dir --no-deps -e .
PJRT_DEVICE=CPU "$VENV/bin/python" -c "import torch, torch_xla, torch_xla.runtime as xr; print('torch', torch.__version__, 'torch_xla', torch_xla.__version__, 'devices', xr.global_runtime_device_count())"
cp scripts/xla-requirements.txt "$stamp"
echo "the XLA environment is made in $(pwd)/$VENV"
