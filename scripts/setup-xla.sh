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
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -r scripts/xla-requirements.txt numpy
# fsdp-orch's own dependencies but torch (its pin is the main environment's 2.13.0).
"$VENV/bin/python" -m pip install --quiet pyyaml "jinja2>=3.1" "pydantic>=2.6" "tenacity>=8.2" \
  "croniter>=6.0" "py-spy>=0.3.14" "fabric>=3.2"
"$VENV/bin/python" -m pip install --quiet --no-deps -e .
PJRT_DEVICE=CPU "$VENV/bin/python" -c "import torch, torch_xla, torch_xla.runtime as xr; print('torch', torch.__version__, 'torch_xla', torch_xla.__version__, 'devices', xr.global_runtime_device_count())"
cp scripts/xla-requirements.txt "$stamp"
echo "the XLA environment is made in $(pwd)/$VENV"
