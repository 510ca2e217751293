"""Goodput accounting, from hand-built event logs folded as status folds them: each bucket, and the
buckets adding up to the wall time exactly."""

from __future__ import annotations

import pytest

from fsdp_orch.record import event_types
from fsdp_orch.record.fold import fold
from fsdp_orch.record.goodput import BUCKETS, Goodput

T0 = 1_700_000_000.0


def job(*events: event_types.Event, now: float | None = None) -> Goodput:
    status = fold([event_types.Submitted(at=T0, job="j", name="demo", cluster="local",
                                         run_dir="/r"), *events], "j")
    assert status is not None
    breakdown = status.goodput(now)
    assert sum(breakdown.seconds.values()) == pytest.approx(breakdown.wall_s, abs=1e-9)
    spans = breakdown.spans
    assert spans[0].start == T0 and spans[-1].end == breakdown.until
    assert all(a.end == b.start
               for a, b in zip(spans, spans[1:], strict=False)), "spans tile the wall time"
    return breakdown


def seconds(breakdown: Goodput) -> dict[str, float]:
    return {b: round(s, 6) for b, s in breakdown.seconds.items() if round(s, 6) != 0}


def attempt(n: int, start: float, first: float, steps: list[tuple[int, float]],
            **started: object) -> list[event_types.Event]:
    return [event_types.AttemptStarted(at=start, attempt=n, **started),  # type: ignore[arg-type]
            event_types.AttemptLaunched(at=start + 0.5, attempt=n, backend_ref="local"),
            event_types.FirstStep(at=first + 0.2, attempt=n, first_step_at=first),
            *(event_types.Progress(at=at + 0.3, step=step, loss=1.0, progress_at=at)
              for step, at in steps)]


def test_a_clean_run_is_queue_startup_productive_and_teardown() -> None:
    g = job(*attempt(0, T0 + 2, T0 + 6, [(1, T0 + 6), (50, T0 + 31), (100, T0 + 56)]),
            event_types.AttemptEnded(at=T0 + 58, attempt=0, exit_code=0),
            event_types.Finished(at=T0 + 59, state="SUCCEEDED"))
    assert seconds(g) == {"queue": 2, "startup": 4, "productive": 50, "teardown": 3}
    assert g.wall_s == 59 and g.goodput_pct == pytest.approx(100 * 50 / 59)
    assert g.largest_loss() == ("startup", 4)


def test_a_crash_and_a_restart_after_backoff_retrain_the_steps_since_the_checkpoint() -> None:
    g = job(*attempt(0, T0 + 1, T0 + 5, [(1, T0 + 5), (50, T0 + 30)]),
            event_types.CheckpointCommitted(at=T0 + 26, step=40, path="/ck/step-40"),
            event_types.FailureDetected(at=T0 + 31, attempt=0, category="python_exception",
                                        action="restart"),
            event_types.AttemptEnded(at=T0 + 32, attempt=0, exit_code=1),
            event_types.RestartScheduled(at=T0 + 32, delay=3.0),
            *attempt(1, T0 + 35, T0 + 38, [(41, T0 + 38), (100, T0 + 68)],
                     resume_from="/ck/step-40", resume_step=40),
            event_types.AttemptEnded(at=T0 + 69, attempt=1, exit_code=0),
            event_types.Finished(at=T0 + 70, state="SUCCEEDED"))
    lost = 10 * 30 / 59  # steps 41..50 again, at attempt 1's 30 s / 59 steps
    assert seconds(g) == {
        "queue": 1, "startup": 4 + 3, "productive": round(25 + 30 - lost, 6), "detection": 1,
        "teardown": 1 + 2, "restart": 3, "lost_work": round(lost, 6)}
    assert [(s.bucket, s.attempt) for s in g.spans if s.attempt == 1][:3] == [
        ("startup", 1), ("lost_work", 1), ("productive", 1)]


def test_a_hangs_detection_runs_from_its_stall_not_from_the_last_progress_event() -> None:
    g = job(*attempt(0, T0 + 1, T0 + 5, [(1, T0 + 5), (30, T0 + 20)]),
            event_types.FailureDetected(at=T0 + 32, attempt=0, category="hang", action="give_up",
                                        stalled_for_s=10.0),
            event_types.AttemptEnded(at=T0 + 34, attempt=0, exit_code=-9),
            event_types.Finished(at=T0 + 35, state="FAILED", reason="hang"))
    assert seconds(g) == {
        "queue": 1, "startup": 4, "productive": 17, "detection": 10, "teardown": 3}
    assert g.largest_loss() == ("detection", 10)


def test_an_attempt_that_fails_before_its_first_step_is_all_startup() -> None:
    g = job(event_types.AttemptStarted(at=T0 + 1, attempt=0),
            event_types.FailureDetected(at=T0 + 9, attempt=0, category="import_error",
                                        action="give_up"),
            event_types.AttemptEnded(at=T0 + 10, attempt=0, exit_code=1),
            event_types.Finished(at=T0 + 10, state="FAILED"))
    assert seconds(g) == {"queue": 1, "startup": 8, "teardown": 1}
    assert g.goodput_pct == 0


def test_a_resume_that_never_passes_the_earlier_attempt_is_all_lost_work() -> None:
    g = job(*attempt(0, T0 + 1, T0 + 2, [(1, T0 + 2), (80, T0 + 12)]),
            event_types.FailureDetected(at=T0 + 12, attempt=0, category="python_exception",
                                        action="restart"),
            event_types.AttemptEnded(at=T0 + 12, attempt=0, exit_code=1),
            *attempt(1, T0 + 12, T0 + 13, [(1, T0 + 13), (60, T0 + 20)]),  # from scratch
            event_types.AttemptEnded(at=T0 + 21, attempt=1, exit_code=1),
            event_types.Finished(at=T0 + 21, state="FAILED"))
    assert seconds(g) == {"queue": 1, "startup": 2, "productive": 10, "lost_work": 7, "teardown": 1}


def test_a_requeued_allocations_wait_is_queue_not_restart() -> None:
    g = job(*attempt(0, T0 + 1, T0 + 3, [(1, T0 + 3), (20, T0 + 19)]),
            event_types.FailureDetected(at=T0 + 20, attempt=0, category="preemption_or_node_lost",
                                        action="requeue"),
            event_types.AttemptEnded(at=T0 + 21, attempt=0, exit_code=None),
            event_types.AllocationRequeued(at=T0 + 21.5, reason="requeued by the scheduler"),
            *attempt(1, T0 + 50, T0 + 52, [(21, T0 + 52), (40, T0 + 70)], resume_from="/ck/step-20",
                     resume_step=20),
            event_types.AttemptEnded(at=T0 + 70, attempt=1, exit_code=0),
            event_types.Finished(at=T0 + 71, state="SUCCEEDED"))
    assert seconds(g) == {"queue": 1 + 29, "startup": 2 + 2, "productive": 16 + 18, "detection": 1,
                          "teardown": 1 + 1}


def test_a_running_job_is_accounted_to_now_and_its_document_to_its_latest_event() -> None:
    events = [*attempt(0, T0 + 1, T0 + 3, [(1, T0 + 3), (20, T0 + 13)])]
    g = job(*events, now=T0 + 40)
    assert seconds(g) == {"queue": 1, "startup": 2, "productive": 37}
    status = fold([event_types.Submitted(at=T0, job="j", name="demo", cluster="local",
                                         run_dir="/r"), *events], "j")
    assert status is not None
    doc = status.to_json()["goodput"]
    # the last progress event, written at +13.3
    assert doc["running"] is True and doc["wall_s"] == 13.3
    assert (doc["seconds"]["productive"] == 10.3
            and doc["goodput_pct"] == round(100 * 10.3 / 13.3, 2))
    assert (list(doc["seconds"]) == list(BUCKETS)
            and sum(doc["percent"].values()) == pytest.approx(100, abs=0.05))


def test_an_attempt_whose_end_the_log_never_says_leaves_its_time_unaccounted() -> None:
    g = job(*attempt(0, T0 + 1, T0 + 3, [(1, T0 + 3), (20, T0 + 13)]),
            event_types.Finished(at=T0 + 60, state="FAILED", reason="supervisor exited"))
    assert seconds(g) == {"queue": 1, "startup": 2, "productive": 10, "unaccounted": 47}


def test_a_host_clock_behind_the_supervisors_moves_a_fact_up_and_the_sum_stays_exact() -> None:
    # first step "before" the start
    g = job(*attempt(0, T0 + 5, T0 + 4, [(1, T0 + 4), (10, T0 + 9)]),
            event_types.AttemptEnded(at=T0 + 10, attempt=0, exit_code=0),
            event_types.Finished(at=T0 + 10, state="SUCCEEDED"))
    assert seconds(g) == {"queue": 5, "productive": 4, "teardown": 1}


def test_a_job_cancelled_before_any_attempt_was_all_queue() -> None:
    g = job(event_types.Finished(at=T0 + 7, state="CANCELLED", reason="cancelled"))
    assert seconds(g) == {"queue": 7} and g.goodput_pct == 0 and g.largest_loss() == ("queue", 7)


def test_status_id_says_the_goodput_and_the_largest_loss() -> None:
    from fsdp_orch.cli.status_table import detail_lines

    status = fold([event_types.Submitted(at=T0, job="j", name="demo", cluster="local",
                                         run_dir="/r"),
                   *attempt(0, T0 + 1, T0 + 5, [(1, T0 + 5), (30, T0 + 20)]),
                   event_types.FailureDetected(at=T0 + 32, attempt=0, category="hang",
                                               action="give_up",
                                         stalled_for_s=10.0),
                   event_types.AttemptEnded(at=T0 + 34, attempt=0, exit_code=-9),
                   event_types.Finished(at=T0 + 35, state="FAILED", reason="hang")], "j")
    assert status is not None
    assert "goodput: 48.6% of 35s (largest loss: detection 10.0s)" in detail_lines(status)


def test_the_runtimes_blocking_saves_come_out_of_the_training_span() -> None:
    g = job(event_types.AttemptStarted(at=T0 + 1, attempt=0),
            event_types.FirstStep(at=T0 + 3, attempt=0, first_step_at=T0 + 3),
            event_types.Progress(at=T0 + 3, step=1, loss=1.0, progress_at=T0 + 3),
            event_types.Progress(at=T0 + 13, step=50, loss=1.0, progress_at=T0 + 13,
                                 checkpoint_s=1.5),
            event_types.Progress(at=T0 + 23, step=99, loss=1.0, progress_at=T0 + 23,
                                 checkpoint_s=2.25),
            event_types.AttemptEnded(at=T0 + 24, attempt=0, exit_code=0),
            event_types.Finished(at=T0 + 24, state="SUCCEEDED"))
    assert seconds(g) == {
        "queue": 1, "startup": 2, "checkpoint": 2.25, "productive": 17.75, "teardown": 1}
