"""The package type-checks: mypy over ``fsdp_orch`` at the strictness that pyproject.toml's
``[tool.mypy]`` sets (a bare generic such as ``dict`` is an error, and so is a ``# type: ignore``
that ignores nothing). Its cache is .mypy_cache at the top of the repo (git-ignored): about 35 s
cold, 2 s warm."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_mypy_passes_over_the_package() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(REPO / ".mypy_cache"),
         "--no-color-output"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy found errors:\n{proc.stdout}{proc.stderr}"
