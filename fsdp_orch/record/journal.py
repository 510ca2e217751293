"""What happens to a job, written as events (``events.py``): the one way anything records a job's
history. The supervisor writes through a Journal on whatever node it runs; the CLI reads the events
into its index (``index.py``). Stdlib only: nothing here opens the database."""

from __future__ import annotations

import os
import socket
from typing import Any

from fsdp_orch.record.events import EventWriter
from fsdp_orch.vocab.states import TERMINAL_NAMES, JobState

TERMINAL = frozenset(TERMINAL_NAMES)
HOST_EXCLUDED = "host_excluded"  # the notice of a host lost mid-run, left out of later attempts


def _loss(value: float | None) -> float | None:
    # JSON has no NaN or infinity: a diverged loss shows as null.
    if value is None:
        return None
    loss = float(value)
    return loss if loss == loss and abs(loss) != float("inf") else None


class Journal:
    """One writer's events for one job."""

    def __init__(self, writer: EventWriter, job_id: str):
        self.writer = writer
        self.job_id = job_id

    def _append(self, kind: str, now: float | None = None, **fields: Any) -> dict[str, Any]:
        return self.writer.append(kind, at=now, job=self.job_id, **fields)

    def submitted(self, *, name: str, cluster: str, kind: str, spec_json: str, run_dir: str,
                  job_file: str | None, spec_hash: str | None, idempotency_key: str | None,
                  origin: dict[str, Any] | None = None, now: float | None = None) -> None:
        """``origin``: where the job came from (``schedule``/``tick``, ``init_from``), shown by status."""
        self._append("submitted", now, name=name, cluster=cluster, cluster_kind=kind, spec_json=spec_json,
                     run_dir=run_dir, job_file=job_file, spec_hash=spec_hash, idempotency_key=idempotency_key,
                     origin=origin or None)

    def supervisor_started(self, pid: int | None = None, now: float | None = None) -> None:
        self._append("supervisor_started", now, pid=os.getpid() if pid is None else pid,
                     host=socket.gethostname())

    def scheduled(self, backend_ref: str, now: float | None = None) -> None:
        """Handed to the scheduler (a SLURM job id)."""
        self._append("scheduled", now, backend_ref=backend_ref)

    def start_attempt(self, attempt: int, *, resume_from: str | None, now: float | None = None) -> None:
        self._append("attempt_started", now, attempt=attempt, resume_from=resume_from)

    def launched(self, attempt: int, backend_ref: str, now: float | None = None) -> None:
        self._append("attempt_launched", now, attempt=attempt, backend_ref=backend_ref)

    def first_step(self, attempt: int, when: float) -> None:
        self._append("first_step", None, attempt=attempt, first_step_at=when)

    def progress(self, step: int, loss: float | None, progress_at: float, now: float | None = None) -> None:
        self._append("progress", now, step=step, loss=_loss(loss), progress_at=progress_at)

    def checkpoint(self, step: int, now: float | None = None) -> None:
        self._append("checkpoint_committed", now, step=step)

    def hang_detection(self, off_because: str | None, now: float | None = None) -> None:
        self._append("hang_detection", now, off_because=off_because)

    def add_failure(self, *, attempt: int, category: str, evidence: str | None, action: str,
                    stalled_for_s: float | None = None, now: float | None = None) -> None:
        self._append("failure_detected", now, attempt=attempt, category=category, evidence=evidence,
                     action=action, stalled_for_s=stalled_for_s)

    def add_event(self, *, attempt: int | None, kind: str, message: str, now: float | None = None) -> None:
        """Something noticed that is not a failure (a checkpoint moved aside, stacks taken)."""
        self._append("notice", now, attempt=attempt, notice=kind, message=message)

    def host_excluded(self, *, attempt: int, host: str, message: str, now: float | None = None) -> None:
        """A host (``address:port``) lost in ``attempt``: later attempts are planned without it. A
        notice to ``status``; ``JobView.excluded_hosts`` to a supervisor that re-attaches."""
        self._append("notice", now, attempt=attempt, notice=HOST_EXCLUDED, message=message, host=host)

    def end_attempt(self, attempt: int, exit_code: int | None, now: float | None = None) -> None:
        self._append("attempt_ended", now, attempt=attempt, exit_code=exit_code)

    def restart_scheduled(self, reason: str | None, delay: float, now: float | None = None) -> None:
        self._append("restart_scheduled", now, reason=reason, delay=delay)

    def requeued(self, reason: str, now: float | None = None) -> None:
        self._append("allocation_requeued", now, reason=reason)

    def set_state(self, state: JobState, *, reason: str | None = None, now: float | None = None) -> None:
        """Any other change of state; a terminal one is the job's end (``finished``)."""
        kind = "finished" if state.is_terminal() else "state"
        self._append(kind, now, state=state.value, reason=reason)




class JobView:
    """A job as its events tell it, for the processes that never open the index (the supervisor):
    its state, its attempts and its failures. Terminal states are final, as in the index."""

    def __init__(self, events: list[dict[str, Any]]):
        self.state: str | None = None
        self.attempts: dict[int, dict[str, Any]] = {}
        self.failures: list[tuple[int, str]] = []  # (attempt, action)
        self.backend_ref: str | None = None
        self.excluded_hosts: list[str] = []  # address:port, in the order they were lost
        for event in events:
            self._apply(event)

    def apply(self, event: dict[str, Any]) -> None:
        """One more event, after those seen so far (a reader following the log: the notifier)."""
        self._apply(event)

    def _set(self, state: str) -> None:
        if self.state not in TERMINAL:
            self.state = state

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        if kind == "submitted":
            self._set(JobState.PENDING.value)
        elif kind == "attempt_started":
            if self.state not in TERMINAL:
                self.state = JobState.RUNNING.value
                self.attempts[int(event["attempt"])] = {"started_at": event["at"], "ended_at": None,
                                                        "resume_from": event.get("resume_from")}
        elif kind == "attempt_ended" and int(event["attempt"]) in self.attempts:
            self.attempts[int(event["attempt"])]["ended_at"] = event["at"]
        elif kind in ("restart_scheduled", "allocation_requeued"):
            self._set(JobState.RESTARTING.value)
        elif kind in ("state", "finished"):
            self._set(str(event["state"]))
        elif kind == "failure_detected":
            self.failures.append((int(event["attempt"]), str(event["action"])))
        elif kind in ("scheduled", "attempt_launched"):
            self.backend_ref = event.get("backend_ref")
        elif kind == "notice" and event.get("notice") == HOST_EXCLUDED and event.get("host") \
                and event["host"] not in self.excluded_hosts:
            self.excluded_hosts.append(str(event["host"]))

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL



__all__ = ["JobView", "Journal"]
