"""The second environment, with torch_xla (``.venv-xla``, made by ``scripts/setup-xla.sh``), for
every test that runs jobs on XLA: the ``xla_python`` session fixture (import it into a conftest or a
test module), and the demo's arguments at a size XLA compiles quickly."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

# SMALL_DEMO: the demo at a size that also compiles in seconds on 2 CPU cores (compiling
# dominates XLA's start-up).
from cli_harness import REPO, SMALL_DEMO  # noqa: F401 (imported from here by the XLA tests)

XLA_VENV = REPO / ".venv-xla"
XLA_DEVICES = 4


@pytest.fixture(scope="session")
def xla_python() -> Path:
    """The XLA environment's python, made (or waited for) by scripts/setup-xla.sh."""
    proc = subprocess.run(["bash", str(REPO / "scripts" / "setup-xla.sh")], capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, (f"scripts/setup-xla.sh failed:\n{proc.stdout[-3000:]}"
                                  f"\n{proc.stderr[-3000:]}")
    return XLA_VENV / "bin" / "python"
