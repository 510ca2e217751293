"""``submit --wait``'s live line, from the job's folded events: attempts numbered from 0 as
``events`` and ``logs --attempt`` number them, and no step of an earlier attempt shown for the
current one."""

from __future__ import annotations

import json

from fsdp_orch.control.follow import progress_line
from fsdp_orch.record import event_types
from fsdp_orch.record.fold import fold
from fsdp_orch.record.status import JobStatus

T0 = 1_700_000_000.0
SPEC = json.dumps({"restart": {"max_restarts": 3}})
R1 = "restart 1 of 3; without progress 0 of 3"


def line(*events: event_types.Event) -> str:
    status = fold([event_types.Submitted(at=T0, job="j1", name="demo", cluster="local",
                                         run_dir="/runs/j1",
                                   spec_json=SPEC), *events], "j1")
    assert isinstance(status, JobStatus)
    return progress_line(status)


FIRST = (event_types.AttemptStarted(at=T0 + 1, attempt=0),
         event_types.Progress(at=T0 + 2, step=120, loss=2.5, progress_at=T0 + 2),
         event_types.FailureDetected(at=T0 + 3, attempt=0, category="hang", action="restart"),
         event_types.RestartScheduled(at=T0 + 3, delay=1.0))


def test_attempts_are_numbered_from_0() -> None:
    assert line() == "j1  PENDING"
    assert line(FIRST[0]) == "j1  RUNNING  attempt 0"
    assert line(*FIRST[:2]) == "j1  RUNNING  attempt 0  step 120  loss 2.5000"
    assert (line(*FIRST, event_types.AttemptStarted(at=T0 + 5, attempt=1))
            == f"j1  RUNNING  attempt 1 ({R1})")


def test_a_restarted_attempt_shows_no_step_until_it_reports_one_of_its_own() -> None:
    restarted = (*FIRST, event_types.CheckpointCommitted(at=T0 + 2, step=100),
                 event_types.AttemptStarted(at=T0 + 5, attempt=1))
    assert "step 120" not in line(*restarted)
    assert line(*restarted) == f"j1  RUNNING  attempt 1 ({R1})  checkpoint 100"
    assert line(*restarted, event_types.Progress(at=T0 + 6, step=102, progress_at=T0 + 6)) == (
        f"j1  RUNNING  attempt 1 ({R1})  step 102  checkpoint 100")


def test_an_attempt_the_scheduler_requeued_uses_no_restart() -> None:
    requeued = (event_types.AttemptStarted(at=T0 + 1, attempt=0),
                event_types.FailureDetected(at=T0 + 2, attempt=0,
                                            category="preemption_or_node_lost", action="requeue"),
                event_types.AllocationRequeued(at=T0 + 2, reason="requeued"),
                event_types.AttemptStarted(at=T0 + 5, attempt=1))
    assert line(*requeued) == (
        "j1  RUNNING  attempt 1 (restart 0 of 3; without progress 0 of 3, 1 requeue)")


def test_no_checkpoint_ahead_of_the_step_shown() -> None:
    """A script that counts its steps from 1 again after it resumed (its own counter, not the
    checkpoint's) reports step 1 before step 61: the checkpoint is left out until the step is past
    it, not shown as ``step 1 ... checkpoint 60``."""
    resumed = (*FIRST, event_types.CheckpointCommitted(at=T0 + 2, step=60),
               event_types.AttemptStarted(at=T0 + 5, attempt=1))
    assert line(*resumed, event_types.Progress(at=T0 + 6, step=1, progress_at=T0 + 6)) == (
        f"j1  RUNNING  attempt 1 ({R1})  step 1")
    assert line(*resumed, event_types.Progress(at=T0 + 6, step=60, progress_at=T0 + 6)) == (
        f"j1  RUNNING  attempt 1 ({R1})  step 60  checkpoint 60")


def test_a_restart_waiting_out_its_backoff_says_how_long_is_left() -> None:
    status = fold([event_types.Submitted(at=T0, job="j1", name="demo", cluster="local",
                                         run_dir="/runs/j1", spec_json=SPEC),
                   *FIRST[:3], event_types.RestartScheduled(at=T0 + 3, delay=20.0)], "j1")
    assert isinstance(status, JobStatus)
    assert progress_line(status, now=T0 + 8) == (
        "j1  RESTARTING  attempt 0  step 120  loss 2.5000  next attempt in 15s")
    assert progress_line(status, now=T0 + 30).endswith("next attempt starting")


def test_the_countdown_agrees_with_the_restart_events_delay() -> None:
    """``delay=2.15`` in the event reads "2.2s" when it is scheduled; never "0s" while time is
    left."""
    status = fold([event_types.Submitted(at=T0, job="j1", name="demo", cluster="local",
                                         run_dir="/runs/j1", spec_json=SPEC),
                   *FIRST[:3], event_types.RestartScheduled(at=T0 + 3, delay=2.15)], "j1")
    assert isinstance(status, JobStatus)
    assert progress_line(status, now=T0 + 3).endswith("next attempt in 2.2s")
    assert progress_line(status, now=T0 + 5.1).endswith("next attempt in 0.1s")
    assert progress_line(status, now=T0 + 5.2).endswith("next attempt starting")


def test_a_failure_is_said_with_its_category_action_evidence_and_hint() -> None:
    from fsdp_orch.control.follow import failure_lines
    from fsdp_orch.record.status import Failure

    hang = Failure(attempt=0, category="hang", detected_at=T0, stalled_for_s=31.0,
                   action="restart", hint="a rank stopped making progress",
                   evidence="rank 1 stuck in train.py:88 main (not in a collective); 1 waiting")
    assert failure_lines(hang, "3f2a9c1b7d0e") == [
        "attempt 0 failed: hang -> restart",
        "  rank 1 stuck in train.py:88 main (not in a collective) (more: fsdp-orch status "
        "3f2a9c1b7d0e)",
        "  hint: a rank stopped making progress"]


def test_the_line_counts_failures_in_a_row_without_progress_against_the_budget():
    """With the defaults (no cap), the restarts are counted as they come, and the failures without
    progress since the last one that made some, against restart.crash_loop_attempts."""
    def failed(attempt: int, progressed: bool) -> tuple[event_types.Event, ...]:
        at = T0 + 10 * attempt
        return (event_types.AttemptStarted(at=at, attempt=attempt),
                event_types.FailureDetected(at=at + 5, attempt=attempt, category="hang",
                                            action="restart", progressed=progressed),
                event_types.RestartScheduled(at=at + 5, delay=1.0))
    events = [*failed(0, True), *failed(1, True), *failed(2, False), *failed(3, False),
              event_types.AttemptStarted(at=T0 + 50, attempt=4)]
    status = fold([event_types.Submitted(at=T0, job="j1", name="demo", cluster="local",
                                         run_dir="/runs/j1",
                                         spec_json=json.dumps({"restart": {
                                             "max_restarts": None, "crash_loop_attempts": 3}})),
                   *events], "j1")
    assert isinstance(status, JobStatus)
    assert progress_line(status) == "j1  RUNNING  attempt 4 (restart 4; without progress 2 of 3)"
    assert status.to_json()["restart_budget"] == {
        "restarts": 4, "max_restarts": None, "failures_without_progress": 2,
        "crash_loop_attempts": 3}
    assert [f["progressed"] for f in status.to_json()["failures"]] == [True, True, False, False]
