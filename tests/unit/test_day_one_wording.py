"""What the first day on a real cluster read wrong (issue 62): the commands a hint suggests name the
job instead of ``JOB``/``JOB_ID``; an event of the job's own, before any attempt (``submit_fresh``),
is not "attempt None" in ``status ID`` or the report; and after ``--wait --timeout`` the table
starts on a line of its own, not glued to the live progress line."""

from __future__ import annotations

import io
import json

import pytest

from fsdp_orch.cli.status_table import detail_lines
from fsdp_orch.control import follow
from fsdp_orch.record import event_types
from fsdp_orch.record.fold import fold
from fsdp_orch.record.status import Failure, JobStatus
from fsdp_orch.report.page import render
from fsdp_orch.vocab.hints import HINTS, for_job

T0 = 1_700_000_000.0
JOB = "3f2a9c1b7d0e"
FRESH = "starting fresh: moved the checkpoints aside to /ck/.fsdp-orch-previous (kept)"


def a_job() -> tuple[JobStatus, list[event_types.Event]]:
    events: list[event_types.Event] = [
        event_types.Submitted(at=T0, job=JOB, name="demo", cluster="local", run_dir="/runs/x",
                              spec_json=json.dumps({"restart": {"max_restarts": 3}})),
        event_types.Notice(at=T0, attempt=None, notice="submit_fresh", message=FRESH),
        event_types.AttemptStarted(at=T0 + 1, attempt=0),
        event_types.FailureDetected(at=T0 + 3, attempt=0, category="unknown", action="give_up",
                                    evidence="rank 0 failed first: exited with code 1",
                                    hint=HINTS["unknown"]),
    ]
    status = fold(events, JOB)
    assert isinstance(status, JobStatus)
    return status, events


def test_the_commands_a_hint_suggests_name_the_job() -> None:
    unknown = Failure(attempt=0, category="unknown", detected_at=T0, stalled_for_s=None,
                      action="restart", hint=HINTS["unknown"],
                      evidence="rank 1 stuck in train.py:88; rank 0 waiting")
    said = "\n".join(follow.failure_lines(unknown, JOB))
    assert f"fsdp-orch logs {JOB}" in said and f"fsdp-orch status {JOB}" in said, said
    assert "JOB" not in said.replace(JOB, ""), said
    status, _ = a_job()
    shown = "\n".join(detail_lines(status, now=T0 + 10))
    assert f"(fsdp-orch logs {JOB})" in shown, shown
    assert for_job("see fsdp-orch logs JOBS", JOB) == "see fsdp-orch logs JOBS"  # a word, not it


def test_an_event_before_any_attempt_is_not_attempt_none() -> None:
    status, events = a_job()
    shown = "\n".join(detail_lines(status, now=T0 + 10))
    assert f"submit_fresh: {FRESH}" in shown and "attempt None" not in shown, shown
    page = render(status, events)
    assert "submit_fresh" in page and ">None<" not in page


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Index:
    """The index as ``wait_for`` reads it: a job that stays RUNNING."""

    def __init__(self, status: JobStatus) -> None:
        self.store = self
        self.status = status

    def ingest(self, ids: list[str]) -> None:
        pass

    def job_as_shown(self, job_id: str) -> JobStatus:
        return self.status


def test_after_the_timeout_what_follows_starts_on_its_own_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fsdp_orch.control import liveness

    status, _ = a_job()
    status.failures.clear()
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr(liveness, "refresh", lambda index, ids: [])
    state = follow.wait_for(_Index(status), JOB, show_progress=True, interval=0.01, timeout=0.05)
    assert state == "RUNNING"
    written = terminal.getvalue()
    assert written.startswith("\r\033[K" + JOB) and written.endswith("\n"), repr(written)
