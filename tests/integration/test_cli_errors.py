"""The malformed-input table through a real ``python -m fsdp_orch`` process per case (``render``
with ``--out``, or the case's command): exit code 2, one line on stderr, no traceback, nothing
written in the cwd or ``$FSDP_ORCH_HOME``."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

TABLE = runpy.run_path(str(Path(__file__).resolve().parents[1] / "fixtures" / "bad_inputs.py"))
CASES = TABLE["CASES"]
materialize, listing = TABLE["materialize"], TABLE["listing"]
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_through_a_real_process(case,  # type: ignore[no-untyped-def]
                                          tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    materialize(work, case.files)
    materialize(tmp_path / "home", case.home)
    env = {**os.environ, "FSDP_ORCH_HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    before = listing(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "fsdp_orch", *case.argv("--out", "out")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    for fragment in case.expect:
        assert fragment in lines[0], f"{fragment!r} missing from: {lines[0]}"
    for fragment in case.absent:
        assert fragment not in lines[0], f"{fragment!r} shown in: {lines[0]}"
    assert listing(tmp_path) == before, "an invalid input wrote something"
