"""What a job's events add up to (``record.fold``): the status document's shape, terminal states
that stay final, a diverged loss, the order events are folded in, and the index keeping exactly what
the fold says, also when a writer's log is read late."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_orch.record import model
from fsdp_orch.record.events import EventWriter, read_job
from fsdp_orch.record.fold import fold, fold_lines
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.journal import Journal
from fsdp_orch.record.store import Store
from fsdp_orch.vocab.states import JobState

T0 = 1_700_000_000.0
JOB_KEYS = ["id", "name", "cluster", "state", "attempts", "restarts", "created_at", "ended_at",
            "last_checkpoint_step", "last_checkpoint", "progress", "failures", "reason", "run_dir", "hang_detection",
            "events", "origin"]
FAILURE_KEYS = ["attempt", "category", "evidence", "detected_at", "stalled_for_s", "action", "hint"]


def submitted(at: float = T0, **fields: object) -> model.Submitted:
    return model.Submitted(at=at, job="j1", name="demo", cluster="local", run_dir="/runs/j1", **fields)  # type: ignore[arg-type]


def test_the_status_document_has_its_keys_in_order_and_its_times_in_utc() -> None:
    status = fold([
        submitted(origin={"tick": "2026-01-01T03:00:00Z", "schedule": "nightly"}),
        model.AttemptStarted(at=T0 + 1, attempt=0),
        model.Progress(at=T0 + 2, step=42, loss=2.5, progress_at=T0 + 2),
        model.CheckpointCommitted(at=T0 + 2.5, step=40),
        model.FailureDetected(at=T0 + 3, attempt=0, category="nccl_timeout", evidence="Watchdog caught collective",
                              action="restart", stalled_for_s=12.5, hint="raise the collective timeout"),
        model.Notice(at=T0 + 3.5, attempt=0, notice="stacks_dumped", message="stacks of 2 ranks"),
        model.AttemptStarted(at=T0 + 4, attempt=1, resume_from="/ck/step-40"),
        model.HangDetection(at=T0 + 4.5, off_because="no heartbeats"),
        model.Finished(at=T0 + 100, state="SUCCEEDED"),
    ], "j1")
    assert status is not None
    doc = status.to_json()
    assert list(doc) == JOB_KEYS
    assert (doc["state"], doc["attempts"], doc["restarts"], doc["last_checkpoint_step"]) == ("SUCCEEDED", 2, 1, 40)
    assert doc["created_at"] == "2023-11-14T22:13:20.000Z" and doc["ended_at"] == "2023-11-14T22:15:00.000Z"
    assert doc["progress"] == {"step": 42, "loss": 2.5, "updated_at": "2023-11-14T22:13:22.000Z"}
    (failure,) = doc["failures"]
    assert list(failure) == FAILURE_KEYS
    assert (failure["category"], failure["stalled_for_s"], failure["hint"]) == (
        "nccl_timeout", 12.5, "raise the collective timeout")
    assert doc["events"] == [{"attempt": 0, "at": "2023-11-14T22:13:23.500Z", "kind": "stacks_dumped",
                              "message": "stacks of 2 ranks"}]
    assert doc["hang_detection"] == {"enabled": False, "reason": "no heartbeats"}
    assert list(doc["origin"]) == ["schedule", "tick"]  # sorted, as the index always wrote it
    assert status.attempt_records[1].resume_from == "/ck/step-40"


def test_nothing_is_known_of_a_job_before_its_submission() -> None:
    assert fold([model.AttemptStarted(at=T0, attempt=0)], "j1") is None


@pytest.mark.parametrize("final", ["SUCCEEDED", "FAILED", "CANCELLED"])
def test_a_terminal_state_is_final(final: str) -> None:
    later = [model.Finished(at=T0 + 9, state=s, reason="late") for s in ("SUCCEEDED", "FAILED", "CANCELLED")]
    status = fold([submitted(), model.StateChanged(at=T0 + 1, state="RUNNING"),
                   model.Finished(at=T0 + 5, state=final, reason="done"),
                   model.AttemptStarted(at=T0 + 6, attempt=1),  # a supervisor that lost a race with a cancel
                   model.RestartScheduled(at=T0 + 7, reason="again"), *later], "j1")
    assert status is not None
    assert (status.state, status.ended_at, status.reason, status.attempts) == (final, T0 + 5, "done", 0)


def test_a_success_clears_the_reason_a_restart_left_and_other_states_keep_it() -> None:
    status = fold([submitted(), model.RestartScheduled(at=T0 + 1, reason="restart 1 after hang"),
                   model.StateChanged(at=T0 + 2, state="RUNNING")], "j1")
    assert status is not None and (status.state, status.reason) == ("RUNNING", "restart 1 after hang")
    status = fold([model.Finished(at=T0 + 3, state="SUCCEEDED")], "j1", status)
    assert status is not None and (status.state, status.reason) == ("SUCCEEDED", None)


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), float("-inf")])
def test_a_diverged_loss_shows_as_null(loss: float) -> None:
    status = fold([submitted(), model.Progress(at=T0 + 1, step=7, loss=loss)], "j1")
    assert status is not None
    doc = json.loads(json.dumps(status.to_json(), allow_nan=False))
    assert doc["progress"]["step"] == 7 and doc["progress"]["loss"] is None


def test_a_log_line_of_a_kind_this_version_does_not_know_is_passed_over() -> None:
    lines = [{"kind": "submitted", "at": T0, "name": "n", "cluster": "c", "run_dir": "/r", "new_field": 1},
             {"kind": "from_the_future", "at": T0 + 1, "whatever": True}]
    status = fold_lines(lines, "j1")
    assert status is not None and status.state == "PENDING" and status.name == "n"


def test_the_record_round_trips() -> None:
    status = fold([submitted(idempotency_key="k"), model.SupervisorStarted(at=T0 + 1, pid=7),
                   model.AttemptStarted(at=T0 + 2, attempt=0), model.FirstStep(at=T0 + 3, attempt=0, first_step_at=T0 + 3),
                   model.Notice(at=T0 + 4, attempt=0, notice=model.HOST_EXCLUDED, message="m", host="10.0.0.2:22"),
                   model.AttemptEnded(at=T0 + 5, attempt=0, exit_code=1)], "j1")
    assert status is not None
    again = model.JobStatus.from_record(json.loads(json.dumps(status.to_record())))
    assert again == status and again.excluded_hosts == ["10.0.0.2:22"]
    assert again.attempt_records[0].exit_code == 1 and again.supervisor_pid == 7


# --- the index keeps what the fold says ---------------------------------------------------------


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def index_of(tmp_path: Path, name: str = "jobs.db") -> JobIndex:
    return JobIndex(Store(tmp_path / name), [str(tmp_path / "runs")], warn=lambda text: None)


def folded(run_dir: Path, job_id: str) -> dict:  # type: ignore[type-arg]
    status = fold_lines(read_job(run_dir)[0], job_id)
    assert status is not None
    return status.to_json()


def test_a_supervisor_log_read_after_a_later_cancel_is_folded_in_its_place(tmp_path: Path) -> None:
    """The CLI's cancel is indexed at once; the supervisor's earlier events arrive later. The index
    folds the job again, so it says what the whole log says, not what arrived first."""
    clock = Clock()
    run_dir = tmp_path / "runs" / "j1"
    submit = Journal(EventWriter(run_dir, "submit", clock=clock), "j1")
    submit.submitted(name="n", cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
                     job_file=None, spec_hash=None, idempotency_key=None)
    index = index_of(tmp_path)
    index.ingest()
    supervisor = Journal(EventWriter(run_dir, "supervisor", clock=clock), "j1")
    supervisor.start_attempt(0, resume_from=None)
    supervisor.progress(5, 1.5, clock.now)
    early = clock.now
    cli = index.journal("j1")  # written and indexed at once, later than the supervisor's events
    cli.set_state(JobState.CANCELLED, reason="cancelled by user")
    supervisor.add_failure(attempt=0, category="hang", evidence="e", action="restart", now=early + 0.5)
    index.ingest(["j1"])
    doc = json.loads(index.store.status_json("j1") or "null")
    assert doc == folded(run_dir, "j1")
    assert doc["state"] == "CANCELLED" and doc["attempts"] == 1 and doc["progress"]["step"] == 5
    assert len(doc["failures"]) == 1
    index.ingest(["j1"])  # nothing new: nothing counted twice
    assert json.loads(index.store.status_json("j1") or "null") == doc


def test_the_status_of_an_ended_job_still_takes_its_supervisors_last_events(tmp_path: Path) -> None:
    """A job cancelled by the CLI is terminal at once; its supervisor still writes how the attempt
    ended. A plain ``status`` reads that for a while after the end."""
    clock = Clock()
    run_dir = tmp_path / "runs" / "j1"
    import time

    clock.now = time.time() - 100  # the supervisor wrote before the cancel
    submit = Journal(EventWriter(run_dir, "submit", clock=clock), "j1")
    submit.submitted(name="n", cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
                     job_file=None, spec_hash=None, idempotency_key=None)
    supervisor = Journal(EventWriter(run_dir, "supervisor", clock=clock), "j1")
    supervisor.start_attempt(0, resume_from=None)
    index = index_of(tmp_path)
    index.ingest()
    index.journal("j1").set_state(JobState.CANCELLED, reason="cancelled by user")
    supervisor.end_attempt(0, -15)
    index.ingest()
    assert index.store.job("j1").attempt_records[0].exit_code == -15  # type: ignore[union-attr]
    assert json.loads(index.store.status_json("j1") or "null") == folded(run_dir, "j1")
