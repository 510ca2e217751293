"""A job's status folded from made-up events, for what reads many jobs without running them: the
metrics' unit tests and ``bench/metrics_scrape.py`` (an index of 1,000 such jobs)."""

from __future__ import annotations

from fsdp_orch.record.event_types import (
    AttemptEnded,
    AttemptStarted,
    CheckpointCommitted,
    FailureDetected,
    Finished,
    FirstStep,
    Notice,
    Progress,
    RestartScheduled,
    Submitted,
)
from fsdp_orch.record.fold import fold
from fsdp_orch.record.status import JobStatus

T0 = 1_700_000_000.0


def two_restarts(job_id: str, t0: float = T0, ended: bool = True) -> JobStatus:
    """A job that hung in attempt 0 (3 s stall), crashed in attempt 1 and, ``ended``, succeeded in
    attempt 2; a straggler and refused connections noticed in attempt 1."""
    events = [
        Submitted(at=t0, job=job_id, name="demo", cluster="local", run_dir=f"/nowhere/{job_id}"),
        AttemptStarted(at=t0 + 1, attempt=0),
        FirstStep(at=t0 + 3, attempt=0, first_step_at=t0 + 3),
        Progress(at=t0 + 5, step=10, progress_at=t0 + 5),
        CheckpointCommitted(at=t0 + 5.5, step=10, path="/ckpt/step-10"),
        FailureDetected(at=t0 + 8, attempt=0, category="hang", stalled_for_s=3.0,
                        action="restart"),
        AttemptEnded(at=t0 + 9, attempt=0, exit_code=-9),
        RestartScheduled(at=t0 + 9, reason="restarting", delay=1.0),
        AttemptStarted(at=t0 + 10, attempt=1, resume_from="/ckpt/step-10", resume_step=10),
        FirstStep(at=t0 + 12, attempt=1, first_step_at=t0 + 12),
        Notice(at=t0 + 13, attempt=1, notice="straggler",
               message="node 0, rank 1: the others wait 40% of each step for it"),
        Notice(at=t0 + 14, attempt=1, notice="refused_connections", message="3 connection(s) ..."),
        Notice(at=t0 + 15, attempt=1, notice="refused_connections", message="5 connection(s) ..."),
        Progress(at=t0 + 16, step=20, progress_at=t0 + 16),
        Progress(at=t0 + 20, step=30, progress_at=t0 + 20),
    ]
    if ended:
        events += [
            FailureDetected(at=t0 + 21, attempt=1, category="injected_fault", action="restart"),
            AttemptEnded(at=t0 + 22, attempt=1, exit_code=1),
            RestartScheduled(at=t0 + 22, reason="restarting", delay=1.0),
            AttemptStarted(at=t0 + 23, attempt=2, resume_from="/ckpt/step-10", resume_step=10),
            FirstStep(at=t0 + 26, attempt=2, first_step_at=t0 + 26),
            Progress(at=t0 + 30, step=40, progress_at=t0 + 30),
            CheckpointCommitted(at=t0 + 30.5, step=40, path="/ckpt/step-40"),
            AttemptEnded(at=t0 + 31, attempt=2, exit_code=0),
            Finished(at=t0 + 31, state="SUCCEEDED"),
        ]
    status = fold(events, job_id)
    assert status is not None
    return status
