"""What happens to a job, written as events (``events.py``, typed in ``model.py``): the one way
anything records a job's history. The supervisor writes through a Journal on whatever node it runs;
the CLI reads the events into its index (``index.py``); ``fold.py`` says what they add up to."""

from __future__ import annotations

import os
import socket
from typing import Any

from fsdp_orch.record import event_types
from fsdp_orch.record.event_types import HOST_EXCLUDED
from fsdp_orch.record.events import EventWriter
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.states import JobState


class Journal:
    """One writer's events for one job."""

    def __init__(self, writer: EventWriter, job_id: str):
        self.writer = writer
        self.job_id = job_id

    def _append(self, event: event_types.Event, now: float | None = None) -> dict[str, Any]:
        return self.writer.append(event.KIND, at=now, **event.fields())

    def submitted(self, *, name: str, cluster: str, kind: str, spec_json: str, run_dir: str,
                  job_file: str | None, spec_hash: str | None, idempotency_key: str | None,
                  origin: dict[str, Any] | None = None, now: float | None = None) -> None:
        """``origin``: where the job came from (``schedule``/``tick``,
        ``init_from``), shown by status."""
        self._append(event_types.Submitted(job=self.job_id, name=name, cluster=cluster,
                                           cluster_kind=kind, spec_json=spec_json, run_dir=run_dir,
                                           job_file=job_file, spec_hash=spec_hash,
                                           idempotency_key=idempotency_key,
                                           origin=origin or None), now)

    def supervisor_started(self, pid: int | None = None, now: float | None = None) -> None:
        self._append(event_types.SupervisorStarted(job=self.job_id,
                                                   pid=os.getpid() if pid is None else pid,
                                                   host=socket.gethostname()), now)

    def scheduled(self, backend_ref: str, now: float | None = None) -> None:
        """Handed to the scheduler (a SLURM job id)."""
        self._append(event_types.Scheduled(job=self.job_id, backend_ref=backend_ref), now)

    def start_attempt(self, attempt: int, *, resume_from: str | None,
                      resume_step: int | None = None, now: float | None = None) -> None:
        """``resume_step``: the step of the checkpoint it resumes from,
        when known (goodput's lost work)."""
        self._append(event_types.AttemptStarted(job=self.job_id, attempt=attempt,
                                                resume_from=resume_from,
                                                resume_step=resume_step), now)

    def launched(self, attempt: int, backend_ref: str, now: float | None = None) -> None:
        self._append(event_types.AttemptLaunched(job=self.job_id, attempt=attempt,
                                                 backend_ref=backend_ref), now)

    def first_step(self, attempt: int, when: float) -> None:
        self._append(event_types.FirstStep(job=self.job_id, attempt=attempt, first_step_at=when))

    def progress(self, step: int, loss: float | None, progress_at: float, now: float | None = None,
                 *, loss_source: str | None = None, checkpoint_s: float | None = None,
                 loss_step: int | None = None) -> None:
        """Rank 0's step and the latest loss; ``loss_source``: ``runtime`` (its heartbeat) or the
        console format it was read in. A loss that is not finite is kept as None, without a source.
        ``checkpoint_s``: the seconds its checkpoint saves held
        training up so far in the attempt; ``loss_step``: the step the loss belongs to."""
        loss = event_types.finite(loss)
        self._append(event_types.Progress(job=self.job_id, step=step, loss=loss,
                                          progress_at=progress_at,
                                          loss_source=loss_source if loss is not None else None,
                                          checkpoint_s=checkpoint_s,
                                          loss_step=loss_step if loss is not None else None), now)

    def fit_estimated(self, peak_gib: float, tensor_gib: float,
                      gpu_memory_gib: float | None) -> None:
        self._append(event_types.FitEstimated(job=self.job_id, peak_gib=peak_gib,
                                              tensor_gib=tensor_gib,
                                              gpu_memory_gib=gpu_memory_gib), None)

    def device_peak(self, attempt: int, rank: int, peak_bytes: int) -> None:
        self._append(event_types.DevicePeak(job=self.job_id, attempt=attempt, rank=rank,
                                            peak_bytes=peak_bytes), None)

    def hang_window(self, attempt: int, window_s: float, mode: str,
                    now: float | None = None) -> None:
        """The hang window in force for the attempt's stepping ranks (``fixed`` or ``adaptive``)."""
        self._append(event_types.HangWindow(job=self.job_id, attempt=attempt, window_s=window_s,
                                            mode=mode), now)

    def checkpoint(self, step: int | None, now: float | None = None, *, path: str | None = None,
                   step_note: str = "") -> None:
        """A new latest complete checkpoint; ``step`` None: unknown (``step_note`` says why)."""
        self._append(event_types.CheckpointCommitted(job=self.job_id, step=step, path=path,
                                                     step_note=step_note), now)

    def hang_detection(self, off_because: str | None, now: float | None = None) -> None:
        self._append(event_types.HangDetection(job=self.job_id, off_because=off_because), now)

    def add_failure(self, *, attempt: int, category: str, evidence: str | None, action: str,
                    hint: str | None = None, stalled_for_s: float | None = None,
                    now: float | None = None, progressed: bool | None = None) -> None:
        """``hint``: what the user can do about it, said where the failure was explained;
        ``progressed``: whether its attempt made progress (what the restart budget counts)."""
        self._append(event_types.FailureDetected(job=self.job_id, attempt=attempt,
                                                 category=category, evidence=evidence,
                                                 action=action, stalled_for_s=stalled_for_s,
                                                 hint=hint, progressed=progressed), now)

    def add_event(self, *, attempt: int | None, kind: str, message: str,
                  now: float | None = None) -> None:
        """Something noticed that is not a failure (a checkpoint moved aside, stacks taken)."""
        self._append(event_types.Notice(job=self.job_id, attempt=attempt, notice=kind,
                                        message=message), now)

    def host_excluded(self, *, attempt: int, host: str, message: str,
                      now: float | None = None) -> None:
        """A host (``address:port``) lost in ``attempt``: later attempts are planned without it. A
        notice to ``status``; ``JobStatus.excluded_hosts`` to a supervisor that re-attaches."""
        self._append(event_types.Notice(job=self.job_id, attempt=attempt, notice=HOST_EXCLUDED,
                                        message=message, host=host), now)

    def end_attempt(self, attempt: int, exit_code: int | None, now: float | None = None) -> None:
        self._append(event_types.AttemptEnded(job=self.job_id, attempt=attempt,
                                              exit_code=exit_code), now)

    def restart_scheduled(self, reason: str | None, delay: float, now: float | None = None) -> None:
        self._append(event_types.RestartScheduled(job=self.job_id, reason=reason, delay=delay), now)

    def requeued(self, reason: str, now: float | None = None) -> None:
        self._append(event_types.AllocationRequeued(job=self.job_id, reason=reason), now)

    def set_state(self, state: JobState, *, reason: str | None = None,
                  now: float | None = None, finished: bool | str | None = None,
                  missing: list[str] | None = None) -> None:
        """Any other change of state; a terminal one is the job's end (``finished``), with whether
        the script's final outputs are there when its ranks were stopped after the last
        checkpoint (``finished``, ``missing``)."""
        cls = event_types.Finished if state.is_terminal() else event_types.StateChanged
        self._append(cls(job=self.job_id, state=state.value, reason=reason, finished=finished,
                         missing=missing), now)



def read_status(run_dir: str, job_id: str) -> JobStatus | None:
    """The job as its event logs tell it now, folded here (the processes that never open the index:
    the supervisor); None before its submission is readable."""
    from fsdp_orch.record.events import read_job
    from fsdp_orch.record.fold import fold_lines

    return fold_lines(read_job(run_dir)[0], job_id)


__all__ = ["HOST_EXCLUDED", "Journal", "read_status"]
