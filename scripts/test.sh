#!/usr/bin/env bash
# Sets up a fresh machine (scripts/setup.sh) and runs the whole test suite: unit tests and the
# integration tests with real torchrun processes. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck lints every rendered script in the golden tests; install it where we can (Debian, root).
if ! command -v shellcheck >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get install -y -q shellcheck >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q shellcheck >/dev/null; }) \
    || echo "warning: could not install shellcheck; rendered scripts are checked with bash -n only" >&2
fi
exec .venv/bin/python -m pytest "$@"
