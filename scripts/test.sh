#!/usr/bin/env bash
# Sets up a fresh machine (scripts/setup.sh) and runs the whole test suite: unit tests and the
# integration tests with real torchrun processes, and the XLA path in its own environment
# (scripts/setup-xla.sh). Extra arguments go to pytest.
#   bash scripts/test.sh --quick   the quick tier: the unit tests and one short real job per launcher
#                                  (torchrun, python with mp.spawn, accelerate) on the local kind; no
#                                  root, no apt, no XLA environment
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --quick ]; then
  shift
  bash scripts/setup.sh
  exec .venv/bin/python -m pytest -m "(unit or quick) and not root and not slurm and not xla" "$@"
fi
bash scripts/setup.sh
# The XLA environment (torch 2.9.0 + torch_xla 2.9.0, about 3 GB of wheels) is made in the
# background while the suite runs; tests/xla, which run last, wait for it (tests/xla/conftest.py).
# At the normal priority: at nice 19 it starved beside the busy workers and stress-ng (still unpacking
# after 30 min), and the suite's timing tests hold under load anyway.
bash scripts/setup-xla.sh > .venv-xla.log 2>&1 &
# The golden tests lint every rendered script with shellcheck: install it where we can (Debian, root).
if ! command -v shellcheck >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get install -y -q shellcheck >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q shellcheck >/dev/null; }) \
    || echo "warning: could not install shellcheck; rendered scripts are checked with bash -n only" >&2
fi
# Chromium (Debian's package) opens the report page in tests/integration/test_goodput.py; root only.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }) \
    || echo "warning: could not install chromium; the report's browser test will fail" >&2
fi
# Prometheus (with promtool) and node_exporter (Debian's packages) scrape the metrics exporter in
# tests/integration/test_prometheus.py; root only.
if ! command -v prometheus-node-exporter >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get install -y -q prometheus prometheus-node-exporter >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q prometheus prometheus-node-exporter >/dev/null; }) \
    || echo "warning: could not install prometheus; the metrics tests will fail" >&2
fi
# Tests run side by side in FSDP_ORCH_TEST_WORKERS pytest-xdist workers, 3 by default (docs/contributing.md, "Time"
# and "Under load"); the SLURM tests and the sshd tests each stay in one worker (tests/side_by_side.py). 0: in this process.
exec .venv/bin/python -m pytest -n "${FSDP_ORCH_TEST_WORKERS:-3}" --dist loadscope --no-loadscope-reorder "$@"
