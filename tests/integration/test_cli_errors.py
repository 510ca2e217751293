"""The malformed-input table through a real ``python -m fsdp_orch`` process per case (``render``
with ``--out``, or the case's command): exit code 2, one line on stderr, no traceback, nothing
written in the cwd or ``$FSDP_ORCH_HOME``.

Every case's message is checked in process by tests/unit/test_errors.py (the same table, the same
entry point, the same exit code, line, traceback and nothing-written checks). What only a real
process adds is the process around the message: the interpreter's start-up and exit, the command's
own imports (each command's module is imported only when named), ``$FSDP_ORCH_HOME`` made or not by
a command that uses it, the exit status through ``SystemExit``, and the real stderr the line is
written to. Those depend on the command and on the kind of input, not on which of a kind's values is
wrong, so the suite runs one real process for each command and each kind of input (``IN_SUITE``);
the rest of the table is a sweep (tests/sweep.py), run in full by ``bench/sweeps.py``. Each case is
a cold ``python -m fsdp_orch`` (0.5 s of CPU alone, 1-3 s in the loaded suite: 133 s for the
table)."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from sweep import cases

TABLE = runpy.run_path(str(Path(__file__).resolve().parents[1] / "fixtures" / "bad_inputs.py"))
CASES = TABLE["CASES"]
materialize, listing = TABLE["materialize"], TABLE["listing"]
REPO = Path(__file__).resolve().parents[2]
# One real process for each command and each kind of input the table has; why each is kept:
IN_SUITE = (
    "missing-name",  # render: a required field (the job spec's own check)
    "nodes-wrong-type",  # render: a field's type
    "typo-with-hint",  # render: an unknown field, with a hint
    "yaml-syntax-error",  # render: the YAML parser's error
    "not-utf8",  # render: bytes that are not UTF-8, the line written to the real stderr
    "args-of-200000-items",  # render: the size limit, before parsing 1.5 MB
    "job-file-missing",  # render: no file
    "unknown-cluster",  # render: --cluster, no profile by that name
    "profile-unknown-key",  # render: a profile file of the project's clusters/
    "set-fault-typo",  # render: --set, blamed for what it wrote (not the job file)
    "accelerate-config-bad-value",  # render: another file read, an accelerate config
    "webhook-header-value-crlf",  # render: a token in the input never shown in the line
    "name-with-escape",  # render: a control character named, never written to the terminal
    "schedule-add-name-escapes",  # schedule add
    "schedule-remove-name-escapes",  # schedule remove, with a schedule in $FSDP_ORCH_HOME kept
    "schedule-events-name-escapes",  # schedule events
    "cancel-empty-id",  # cancel
    "status-blank-id",  # status (its own quick parser)
    "logs-empty-id",  # logs
    "events-empty-id",  # events
    "submit-idempotency-key-empty",  # submit: an argument
    "secret-from-env-unset",  # submit: a secret reference read at submit
    "submit-a-missing-script",  # submit: a file checked on this machine
    "init-from-an-unknown-job",  # submit: $FSDP_ORCH_HOME's jobs looked up (it made jobs.db)
)


SWEPT = cases(CASES, [c for c in CASES if c.id in IN_SUITE])


def test_the_cases_kept_in_the_suite_are_in_the_table() -> None:
    assert sorted(c.id for c in CASES if c.id in IN_SUITE) == sorted(IN_SUITE)


@pytest.mark.parametrize("case", SWEPT, ids=[c.id for c in SWEPT])
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
