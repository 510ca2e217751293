"""What a job's events add up to (``record.fold``): the status document's shape, terminal states
that stay final, a diverged loss, the order events are folded in, and the index keeping exactly what
the fold says, also when a writer's log is read late."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_orch.record import event_types
from fsdp_orch.record.events import EventWriter, read_job
from fsdp_orch.record.fold import fold, fold_lines
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.journal import Journal
from fsdp_orch.record.status import STEP_SAMPLES, JobStatus, stall_threshold
from fsdp_orch.record.store import Store
from fsdp_orch.vocab.states import JobState

T0 = 1_700_000_000.0
JOB_KEYS = ["id", "name", "cluster", "state", "attempts", "restarts", "created_at", "ended_at",
            "last_checkpoint_step", "last_checkpoint", "progress", "stalled_for_s", "hang_window_s",
            "hang_held", "failures", "reason", "finished", "missing", "run_dir", "left_out",
            "hang_detection", "events", "origin", "goodput", "memory", "save_cadence",
            "restart_budget"]
FAILURE_KEYS = ["attempt", "category", "evidence", "detected_at", "stalled_for_s", "action", "hint",
                "progressed"]


def submitted(at: float = T0, **fields: object) -> event_types.Submitted:
    return event_types.Submitted(at=at, job="j1", name="demo",  # type: ignore[arg-type]
                                 cluster="local", run_dir="/runs/j1", **fields)


def test_the_status_document_has_its_keys_in_order_and_its_times_in_utc() -> None:
    status = fold([
        submitted(origin={"tick": "2026-01-01T03:00:00Z", "schedule": "nightly"}),
        event_types.AttemptStarted(at=T0 + 1, attempt=0),
        event_types.Progress(at=T0 + 2, step=42, loss=2.5, progress_at=T0 + 2),
        event_types.CheckpointCommitted(at=T0 + 2.5, step=40),
        event_types.FailureDetected(at=T0 + 3, attempt=0, category="nccl_timeout",
                                    evidence="Watchdog caught collective",
                              action="restart", stalled_for_s=12.5,
                                    hint="raise the collective timeout"),
        event_types.Notice(at=T0 + 3.5, attempt=0, notice="stacks_dumped",
                           message="stacks of 2 ranks"),
        event_types.AttemptStarted(at=T0 + 4, attempt=1, resume_from="/ck/step-40"),
        event_types.HangDetection(at=T0 + 4.5, off_because="no heartbeats"),
        event_types.Finished(at=T0 + 100, state="SUCCEEDED"),
    ], "j1")
    assert status is not None
    doc = status.to_json()
    assert list(doc) == JOB_KEYS
    assert (doc["state"], doc["attempts"], doc["restarts"], doc["last_checkpoint_step"]) == (
        "SUCCEEDED", 2, 1, 40)
    assert (doc["created_at"] == "2023-11-14T22:13:20.000Z"
            and doc["ended_at"] == "2023-11-14T22:15:00.000Z")
    assert doc["progress"] == {"step": 42, "loss": 2.5, "loss_source": "runtime", "loss_step": 42,
                               "updated_at": "2023-11-14T22:13:22.000Z"}
    assert (doc["finished"], doc["missing"]) == (True, [])
    assert (doc["stalled_for_s"], doc["hang_window_s"]) == (None, None)
    (failure,) = doc["failures"]
    assert list(failure) == FAILURE_KEYS
    assert (failure["category"], failure["stalled_for_s"], failure["hint"]) == (
        "nccl_timeout", 12.5, "raise the collective timeout")
    assert doc["events"] == [
        {"attempt": 0, "at": "2023-11-14T22:13:23.500Z", "kind": "stacks_dumped",
         "message": "stacks of 2 ranks"}]
    assert doc["hang_detection"] == {"enabled": False, "reason": "no heartbeats"}
    assert list(doc["origin"]) == ["schedule", "tick"]  # sorted, as the index always wrote it
    assert status.attempt_records[1].resume_from == "/ck/step-40"


def test_nothing_is_known_of_a_job_before_its_submission() -> None:
    assert fold([event_types.AttemptStarted(at=T0, attempt=0)], "j1") is None


@pytest.mark.parametrize("final", ["SUCCEEDED", "FAILED", "CANCELLED"])
def test_a_terminal_state_is_final(final: str) -> None:
    later = [event_types.Finished(at=T0 + 9, state=s, reason="late")
             for s in ("SUCCEEDED", "FAILED", "CANCELLED")]
    status = fold([submitted(), event_types.StateChanged(at=T0 + 1, state="RUNNING"),
                   event_types.Finished(at=T0 + 5, state=final, reason="done"),
                   # a supervisor that lost a race with a cancel
                   event_types.AttemptStarted(at=T0 + 6, attempt=1),
                   event_types.RestartScheduled(at=T0 + 7, reason="again"), *later], "j1")
    assert status is not None
    assert (status.state, status.ended_at, status.reason, status.attempts) == (
        final, T0 + 5, "done", 0)


def test_a_success_clears_the_reason_a_restart_left_and_other_states_keep_it() -> None:
    status = fold([submitted(),
                   event_types.RestartScheduled(at=T0 + 1, reason="restart 1 after hang"),
                   event_types.StateChanged(at=T0 + 2, state="RUNNING")], "j1")
    assert (status is not None
            and (status.state, status.reason) == ("RUNNING", "restart 1 after hang"))
    status = fold([event_types.Finished(at=T0 + 3, state="SUCCEEDED")], "j1", status)
    assert status is not None and (status.state, status.reason) == ("SUCCEEDED", None)


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), float("-inf")])
def test_a_diverged_loss_shows_as_null(loss: float) -> None:
    status = fold([submitted(), event_types.Progress(at=T0 + 1, step=7, loss=loss)], "j1")
    assert status is not None
    doc = json.loads(json.dumps(status.to_json(), allow_nan=False))
    assert doc["progress"]["step"] == 7 and doc["progress"]["loss"] is None


def test_a_log_line_of_a_kind_this_version_does_not_know_is_passed_over() -> None:
    lines = [{"kind": "submitted", "at": T0, "name": "n", "cluster": "c", "run_dir": "/r",
              "new_field": 1},
             {"kind": "from_the_future", "at": T0 + 1, "whatever": True}]
    status = fold_lines(lines, "j1")
    assert status is not None and status.state == "PENDING" and status.name == "n"


def test_the_record_round_trips() -> None:
    status = fold([submitted(idempotency_key="k"), event_types.SupervisorStarted(at=T0 + 1, pid=7),
                   event_types.AttemptStarted(at=T0 + 2, attempt=0),
                   event_types.FirstStep(at=T0 + 3, attempt=0, first_step_at=T0 + 3),
                   event_types.Notice(at=T0 + 4, attempt=0, notice=event_types.HOST_EXCLUDED,
                                      message="m", host="10.0.0.2:22"),
                   event_types.AttemptEnded(at=T0 + 5, attempt=0, exit_code=1)], "j1")
    assert status is not None
    again = JobStatus.from_record(json.loads(json.dumps(status.to_record())))
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
    supervisor.add_failure(attempt=0, category="hang", evidence="e", action="restart",
                           now=early + 0.5)
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


# --- the loss's source, the hang window in force, a stall -----------------------------------------


def test_the_loss_keeps_its_source_and_an_older_log_without_one_is_the_runtimes() -> None:
    status = fold([submitted(), event_types.AttemptStarted(at=T0 + 1, attempt=0),
                   event_types.Progress(at=T0 + 2, step=10, loss=2.5, progress_at=T0 + 2,
                                        loss_source="hf_trainer")], "j1")
    assert status is not None
    assert status.to_json()["progress"]["loss_source"] == "hf_trainer"
    fold([event_types.Progress(at=T0 + 3, step=11, loss=2.4, progress_at=T0 + 3)], "j1", status)
    assert status.to_json()["progress"]["loss_source"] == "runtime"  # written before sources were
    fold([event_types.Progress(at=T0 + 4, step=12, loss=float("nan"), progress_at=T0 + 4,
                               loss_source="print")], "j1", status)
    assert status.to_json()["progress"] == {"step": 12, "loss": None, "loss_source": None,
                                            "loss_step": None,
                                            "updated_at": "2023-11-14T22:13:24.000Z"}


def test_the_journal_writes_no_source_for_a_loss_it_cannot_keep(tmp_path: Path) -> None:
    journal = Journal(EventWriter(tmp_path, "supervisor"), "j1")
    journal.progress(3, float("inf"), T0, loss_source="print")
    journal.progress(4, 1.5, T0 + 1, loss_source="lightning")
    lines = [line for line in read_job(tmp_path)[0] if line["kind"] == "progress"]
    assert [(line["loss"], line["loss_source"]) for line in lines] == [
        (None, None), (1.5, "lightning")]


def running(*events: event_types.Event) -> JobStatus:
    status = fold([submitted(), event_types.AttemptStarted(at=T0, attempt=0), *events], "j1")
    assert status is not None
    return status


def steps(start: float, first: int, count: int, every: float,
          per_event: int = 1) -> list[event_types.Event]:
    """Progress events every ``every`` seconds, ``per_event`` steps apart."""
    return [event_types.Progress(at=start + i * every, step=first + i * per_event,
                                 progress_at=start + i * every)
            for i in range(count)]


def test_the_stall_threshold_is_three_step_times_and_at_least_30s_or_half_the_window() -> None:
    assert stall_threshold([], None) == 30.0
    assert stall_threshold([], 10.0) == 5.0  # a short window: a stall shows before the verdict
    # but never within what status can lag the ranks by (a 2 s window: 1 s would flicker)
    assert stall_threshold([], 2.0) == 3.0
    assert stall_threshold([0.05] * 9, 300.0) == 30.0
    assert stall_threshold([20.0, 21.0, 100.0], 600.0) == 63.0  # the median, not one slow step
    # even count: the mean of the middle two
    assert stall_threshold([1.0, 2.0, 30.0, 40.0], 300.0) == 48.0


def test_a_running_job_whose_steps_stopped_is_stalled_by_the_clock_passed_in() -> None:
    status = running(*steps(T0 + 10, 1, 20, every=1.0, per_event=4))  # 0.25 s per step
    last = T0 + 29
    assert status.step_seconds[-1] == 0.25 and len(status.step_seconds) == STEP_SAMPLES
    assert status.stepped_at == last and status.stall_from == last + 30
    assert status.stalled_for_s(last + 30) is None
    assert status.stalled_for_s(last + 42.04) == 42.0
    assert status.to_json(last + 42.04)["stalled_for_s"] == 42.0
    assert status.to_json()["stalled_for_s"] is None  # the kept document: filled in as status reads
    fold([event_types.HangWindow(at=last, attempt=0, window_s=20.0, mode="fixed")], "j1", status)
    assert status.stalled_for_s(last + 10.5) == 10.5  # half the window in force
    assert status.to_json()["hang_window_s"] == 20.0


def test_a_progress_event_that_repeats_the_step_with_a_new_loss_is_no_step() -> None:
    status = running(*steps(T0 + 10, 1, 6, every=2.0))
    fold([event_types.Progress(at=T0 + 30, step=6, loss=1.0, progress_at=T0 + 20,
                               loss_source="print")], "j1", status)
    assert status.stepped_at == T0 + 20 and status.step_seconds == [2.0] * 5


def test_no_stall_before_the_attempts_first_step_nor_once_it_is_not_running() -> None:
    status = running(*steps(T0 + 10, 1, 6, every=2.0),
                     event_types.HangWindow(at=T0 + 11, attempt=0, window_s=300.0, mode="adaptive"),
                     event_types.RestartScheduled(at=T0 + 40, reason="hang"),
                     event_types.AttemptStarted(at=T0 + 45, attempt=1))
    assert status.running and status.stepped_at is None and status.stall_from is None
    assert status.stalled_for_s(T0 + 10_000) is None  # starting up is not a stall
    assert status.to_json()["hang_window_s"] is None  # the new attempt's comes with its steps
    assert status.step_seconds == [2.0] * 5  # step times carry over
    fold([event_types.Progress(at=T0 + 60, step=3, progress_at=T0 + 60)], "j1", status)
    # no sample across attempts
    assert status.stepped_at == T0 + 60 and status.step_seconds == [2.0] * 5
    assert status.stalled_for_s(T0 + 100) == 40.0
    fold([event_types.Finished(at=T0 + 101, state="FAILED")], "j1", status)
    assert status.stall_from is None and status.stalled_for_s(T0 + 200) is None
    again = JobStatus.from_record(json.loads(json.dumps(status.to_record())))
    assert again == status


def stalled_job(tmp_path: Path, job_id: str, stepped_at: float) -> Path:
    """A job whose attempt stepped every second until ``stepped_at``, in a fixed window of 300 s."""
    clock = Clock(stepped_at - 20)
    run_dir = tmp_path / "runs" / job_id
    submit = Journal(EventWriter(run_dir, "submit", clock=clock), job_id)
    submit.submitted(name="n", cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
                     job_file=None, spec_hash=None, idempotency_key=None)
    supervisor = Journal(EventWriter(run_dir, "supervisor", clock=clock), job_id)
    supervisor.start_attempt(0, resume_from=None)
    supervisor.hang_window(0, 300.0, "fixed")
    for step in range(1, 11):
        supervisor.progress(step, 3.0 - step / 10, stepped_at - 10 + step, loss_source="print")
    return run_dir


def test_status_json_fills_in_how_long_a_running_job_has_been_stalled_as_the_fold_says(
        tmp_path: Path) -> None:
    import time

    now = time.time()
    stalled = stalled_job(tmp_path, "j1", now - 100)
    stepping = stalled_job(tmp_path, "j2", now - 5)
    index = index_of(tmp_path)
    index.ingest()
    for job_id, run_dir in (("j1", stalled), ("j2", stepping)):
        status = fold_lines(read_job(run_dir)[0], job_id)
        assert status is not None
        doc = json.loads(index.store.status_json(job_id, now=now) or "null")
        assert doc == status.to_json(now)
    one = json.loads(index.store.status_json("j1", now=now) or "null")
    assert one["stalled_for_s"] == 100.0 and one["hang_window_s"] == 300.0
    assert json.loads(index.store.status_json("j2", now=now) or "null")["stalled_for_s"] is None
    listed = {job["id"]: job for job in json.loads(index.store.status_json(now=now) or "[]")}
    assert listed["j1"]["stalled_for_s"] == 100.0 and listed["j2"]["stalled_for_s"] is None
    limited = json.loads(index.store.status_json(limit=5, now=now) or "[]")
    assert [job["stalled_for_s"] for job in limited] == [100.0, None]
    later = json.loads(index.store.status_json(now=now + 50) or "[]")  # not a cached list of before
    assert [job["stalled_for_s"] for job in later] == [150.0, 55.0]


def test_the_cached_list_keeps_no_time_and_a_stalled_jobs_document_is_put_in_as_it_is_read(
        tmp_path: Path) -> None:
    import time

    now = time.time()
    for job_id in ("j1", "j2", "j3"):
        stalled_job(tmp_path, job_id, now - 2 if job_id != "j2" else now - 60)
    index = index_of(tmp_path)
    index.ingest()
    listed = json.loads(index.store.status_json_bytes(now=now) or b"[]")
    assert {job["id"]: job["stalled_for_s"] for job in listed} == {
        "j1": None, "j2": 60.0, "j3": None}
    [cached] = (tmp_path / "cache").iterdir()
    assert [job["stalled_for_s"] for job in json.loads(cached.read_bytes())] == [None, None, None]
    later = json.loads(index.store.status_json_bytes(now=now + 40) or b"[]")  # from the cache
    assert {job["id"]: job["stalled_for_s"] for job in later} == {
        "j1": 42.0, "j2": 100.0, "j3": 42.0}
    assert later == [
        fold_lines(read_job(tmp_path / "runs" / job["id"])[0],  # type: ignore[union-attr]
                   job["id"]).to_json(now + 40)
        for job in later]


def test_the_status_table_says_stalled_with_the_window_and_the_detail_says_where_the_loss_came_from(
) -> None:
    from fsdp_orch.cli.status_table import detail_lines, format_jobs

    status = running(*[event_types.Progress(at=T0 + 10 + i, step=i, loss=2.0 - i / 100,
                                            progress_at=T0 + 10 + i,
                                      loss_source="hf_trainer") for i in range(1, 6)],
                     event_types.HangWindow(at=T0 + 11, attempt=0, window_s=300.0, mode="fixed"))
    last = T0 + 15
    row = format_jobs([status], now=last + 5).splitlines()[1]
    assert " RUNNING " in row and "stalled" not in row and "1.9500" in row
    assert "RUNNING (stalled 42s/5m)" in format_jobs([status], now=last + 42).splitlines()[1]
    assert "RUNNING (stalled 2h05m/5m)" in format_jobs([status], now=last + 7500).splitlines()[1]
    lines = detail_lines(status, now=last + 42)
    assert "loss: 1.9500 at step 5 (read from the console, hf_trainer format)" in lines
    assert "stalled: no step for 42s; hang window in force: 300s (fixed)" in lines
    assert "hang window in force: 300s (fixed)" in detail_lines(status, now=last + 1)


def test_an_end_says_whether_the_script_finished_what_it_does_after_its_last_step() -> None:
    """A Trainer stopped after its last checkpoint without its final model ends INCOMPLETE with
    what is missing; a success after a training_complete notice that names no outputs is
    "unknown"; an old log's plain success is True."""
    start = [submitted(), event_types.AttemptStarted(at=T0 + 1, attempt=0)]
    missing = ["the Trainer's final model in /w/out"]
    incomplete = fold([*start, event_types.Finished(at=T0 + 9, state="INCOMPLETE",
                                                    finished=False, missing=missing)], "j1")
    assert incomplete is not None and incomplete.ended
    assert (incomplete.to_json()["finished"], incomplete.to_json()["missing"]) == (False, missing)
    stopped = fold([*start, event_types.Notice(at=T0 + 8, attempt=0, notice="training_complete",
                                               message="not restarted"),
                    event_types.Finished(at=T0 + 9, state="SUCCEEDED")], "j1")
    assert stopped is not None and stopped.to_json()["finished"] == "unknown"
    failed = fold([*start, event_types.Finished(at=T0 + 9, state="FAILED")], "j1")
    assert failed is not None and failed.to_json()["finished"] is False
    running = fold(start, "j1")
    assert running is not None and running.to_json()["finished"] is None


def test_a_loss_keeps_the_step_it_belongs_to() -> None:
    status = fold([submitted(), event_types.AttemptStarted(at=T0 + 1, attempt=0),
                   event_types.Progress(at=T0 + 2, step=180, loss=0.4, loss_source="print",
                                        progress_at=T0 + 2, loss_step=178)], "j1")
    assert status is not None
    assert status.to_json()["progress"]["loss_step"] == 178


def test_a_waiting_notice_is_said_as_past_once_its_attempt_has_stepped() -> None:
    """Kubernetes' "ContainerCreating" for a pod of attempt 0 read, under a job at step 68, as if
    the pod still waited (a trial of 2026-12-04); once the attempt steps, it is what it waited
    for."""
    from fsdp_orch.cli.status_table import detail_lines

    why = "pod p-0 on localhost: container node: ContainerCreating"
    waiting = running(event_types.Notice(at=T0 + 1, attempt=0, notice="waiting", message=why))
    assert f"attempt 0: waiting: {why}" in detail_lines(waiting, now=T0 + 2)
    stepped = running(event_types.Notice(at=T0 + 1, attempt=0, notice="waiting", message=why),
                      event_types.FirstStep(at=T0 + 9, attempt=0, first_step_at=T0 + 9))
    lines = detail_lines(stepped, now=T0 + 10)
    assert f"attempt 0: waited before its first step: {why}" in lines
    assert not any(line.startswith("attempt 0: waiting") for line in lines)
    assert stepped.to_json()["events"][0]["kind"] == "waiting"  # the record is unchanged
