"""The supervisor loop: run attempts, follow their progress, record outcomes.

Backend-agnostic: a backend supplies an AttemptLauncher; the clock and sleep are injected.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fsdp_orch.backends.base import Submission
from fsdp_orch.checkpoints import latest_complete
from fsdp_orch.heartbeats import read_heartbeats
from fsdp_orch.render import write_artifacts
from fsdp_orch.states import JobState
from fsdp_orch.store import Store
from fsdp_orch.supervise.attempt import AttemptHandle, AttemptLauncher

STOP_GRACE_S = 5.0


@dataclass
class AttemptOutcome:
    exit_code: int | None
    cancelled: bool = False


class StopFlag:
    """Set by SIGTERM/SIGINT to the supervisor: treat as a cancel."""

    def __init__(self) -> None:
        self.set = False

    def install(self) -> None:
        def handler(signum: int, frame: object) -> None:
            self.set = True

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


class Supervisor:
    def __init__(self, store: Store, submission: Submission, launcher: AttemptLauncher, *,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 stop_flag: StopFlag | None = None, port_for_attempt: Callable[[int], int | None] | None = None,
                 local_has_gpu: bool = False):
        self.store = store
        self.sub = submission
        self.launcher = launcher
        self.clock = clock
        self.sleep = sleep
        self.stop_flag = stop_flag or StopFlag()
        self.port_for_attempt = port_for_attempt or (lambda attempt: None)
        self.local_has_gpu = local_has_gpu
        self.job_id = submission.job_id
        self._last_step: int | None = None
        self._last_ckpt: int | None = None

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> JobState:
        attempt = 0
        resume_from = None
        while True:
            plan, artifacts = self.sub.plan(attempt, resume_from=resume_from,
                                            rdzv_port=self.port_for_attempt(attempt),
                                            local_has_gpu=self.local_has_gpu)
            write_artifacts(artifacts)
            self.store.start_attempt(self.job_id, attempt, resume_from=resume_from, now=self.clock())
            if self._cancel_requested():
                return self._finish_cancelled(None, attempt)
            handle = self.launcher.launch(plan, artifacts)
            self.store.update(self.job_id, backend_ref=handle.ref)
            outcome = self._watch(handle, plan.checkpoint_dir, attempt)
            self.store.end_attempt(self.job_id, attempt, outcome.exit_code, now=self.clock())
            self._record_checkpoint(plan.checkpoint_dir)
            if outcome.cancelled:
                return self._finish_cancelled(handle, attempt)
            if outcome.exit_code == 0:
                self.store.set_state(self.job_id, JobState.SUCCEEDED, now=self.clock())
                return JobState.SUCCEEDED
            evidence = f"attempt {attempt} exited with code {outcome.exit_code}"
            self.store.add_failure(self.job_id, attempt=attempt, category="unknown", evidence=evidence,
                                   action="give_up", now=self.clock())
            self.store.set_state(self.job_id, JobState.FAILED, reason=evidence, now=self.clock())
            return JobState.FAILED

    def _watch(self, handle: AttemptHandle, checkpoint_dir: str, attempt: int) -> AttemptOutcome:
        poll = self.sub.job.watch.poll_interval
        while True:
            code = handle.poll()
            self._record_progress(attempt)
            self._record_checkpoint(checkpoint_dir)
            if code is not None:
                return AttemptOutcome(code)
            if self._cancel_requested():
                handle.stop(STOP_GRACE_S)
                return AttemptOutcome(handle.poll(), cancelled=True)
            self.sleep(poll)

    # --- bookkeeping ------------------------------------------------------------------------

    def _cancel_requested(self) -> bool:
        if self.stop_flag.set:
            return True
        row = self.store.job(self.job_id)
        return row is not None and row["state"] == JobState.CANCELLED.value

    def _finish_cancelled(self, handle: AttemptHandle | None, attempt: int) -> JobState:
        if handle is not None:
            handle.stop(STOP_GRACE_S)
        self.store.set_state(self.job_id, JobState.CANCELLED, reason="cancelled", now=self.clock())
        return JobState.CANCELLED

    def _record_progress(self, attempt: int) -> None:
        beats = read_heartbeats(self.sub.run_dir, attempt)
        if not beats:
            return
        lead = beats.get(0) or next(iter(beats.values()))
        if lead.step is None or lead.step == self._last_step:
            return
        self._last_step = lead.step
        self.store.update(self.job_id, progress_step=lead.step, progress_loss=lead.loss,
                          progress_at=lead.time)

    def _record_checkpoint(self, checkpoint_dir: str) -> None:
        info = latest_complete(Path(checkpoint_dir).expanduser())
        step = info.step if info else None
        if step is not None and step != self._last_ckpt:
            self._last_ckpt = step
            self.store.update(self.job_id, last_checkpoint_step=step)


def run_supervisor(job_id: str) -> int:
    """Entry point of ``python -m fsdp_orch.supervise.supervisor JOB_ID`` (started detached by a backend)."""
    import os

    from fsdp_orch.backends import backend_for_kind
    from fsdp_orch.resources import home
    from fsdp_orch.store import default_path

    store = Store(default_path(home()))
    row = store.job(job_id)
    if row is None:
        print(f"fsdp-orch supervisor: no job {job_id}")
        return 2
    submission = Submission.load(Path(row["run_dir"]))
    store.update(job_id, supervisor_pid=os.getpid())
    stop_flag = StopFlag()
    stop_flag.install()
    backend = backend_for_kind(row["kind"])
    supervisor = Supervisor(store, submission, backend.attempt_launcher(submission),
                            stop_flag=stop_flag, port_for_attempt=backend.port_for_attempt,
                            local_has_gpu=Path("/dev/nvidia0").exists())
    try:
        state = supervisor.run()
    except BaseException as exc:
        store.set_state(job_id, JobState.FAILED, reason=f"supervisor error: {exc!r}")
        raise
    print(f"fsdp-orch supervisor: job {job_id} ended {state.value}", flush=True)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(run_supervisor(sys.argv[1]))
