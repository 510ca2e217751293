"""Every case of the suite's sweeps (``tests/sweep.py``): the test files that keep a few cases in
the suite run here with all of them (``FSDP_ORCH_SWEEP=full``), one pytest process, and its exit
status. Which cases the suite keeps, and why, is said beside each sweep.

    .venv/bin/python bench/sweeps.py [PYTEST_ARG ...]    # e.g. -k strategy
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USES_SWEEP = re.compile(r"^from sweep import", re.MULTILINE)


def sweeping_files() -> list[str]:
    """The test files that import ``sweep``, relative to the checkout."""
    return sorted(str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
                  if USES_SWEEP.search(path.read_text()))


def main(argv: list[str]) -> int:
    files = sweeping_files()
    print(f"sweeps: {len(files)} files, every case: {' '.join(files)}", flush=True)
    started = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *files,
                            *argv], cwd=REPO,
                           env={**os.environ, "FSDP_ORCH_SWEEP": "full"})
    print(f"sweeps: exit {code} after {time.monotonic() - started:.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
