#!/usr/bin/env bash
# Not Python at all: prints a line a second for WORK_SECONDS (default 20) seconds, then exits 0.
set -euo pipefail
seconds=${WORK_SECONDS:-20}
for ((i = 1; i <= seconds; i++)); do
  echo "work.sh: second $i/$seconds on ${HOSTNAME:-localhost} (NODE_RANK=${NODE_RANK:-0})"
  sleep 1
done
echo "work.sh: done"
