"""A job's events, in order, folded into its ``JobStatus``: the one definition of what ``status``
shows. Pure: no files, no clock, no database. The index keeps what this returns; the supervisor and
the notifier fold the same events themselves.

Order matters (a terminal state is final; a later state moves an active job on), so events are
folded in ``events.order_key`` order: the submission first, then by time, writer and sequence.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from fsdp_orch.record.event_types import (
    HOST_EXCLUDED,
    RUNTIME_LOSS,
    AllocationRequeued,
    AttemptEnded,
    AttemptLaunched,
    AttemptStarted,
    CheckpointCommitted,
    DevicePeak,
    Event,
    FailureDetected,
    Finished,
    FirstStep,
    FitEstimated,
    HangDetection,
    HangWindow,
    Notice,
    Progress,
    RestartScheduled,
    Scheduled,
    StateChanged,
    Submitted,
    SupervisorStarted,
    finite,
    parse_event,
)
from fsdp_orch.record.goodput import AttemptRecord
from fsdp_orch.record.save_cadence import note_checkpoint, note_progress
from fsdp_orch.record.status import STEP_SAMPLES, Failure, JobNotice, JobStatus
from fsdp_orch.vocab.states import FINISHED_UNKNOWN as UNKNOWN
from fsdp_orch.vocab.states import TRAINING_COMPLETE, JobState


def fold(events: Iterable[Event], job_id: str, status: JobStatus | None = None) -> JobStatus | None:
    """``status`` (None: nothing yet) with ``events`` applied in the order given. None while the
    job's submission has not been seen: nothing is known of a job before it."""
    for event in events:
        status = apply(status, event, job_id)
    return status


def fold_lines(lines: Iterable[dict[str, Any]], job_id: str,
               status: JobStatus | None = None) -> JobStatus | None:
    """``fold`` over log lines as ``events.read_job`` gives them
    (kinds this version does not know are passed over)."""
    events = (parse_event(line) for line in lines)
    return fold((e for e in events if e is not None), job_id, status)


def apply(status: JobStatus | None, event: Event, job_id: str) -> JobStatus | None:
    if isinstance(event, Submitted):
        return status if status is not None else _submitted(event, job_id)
    if status is None:
        return None
    step = _STEPS.get(type(event))
    if step is not None:
        step(status, event)
    status.last_event_at = max(status.last_event_at, float(event.at))
    return status


def _submitted(event: Submitted, job_id: str) -> JobStatus:
    origin = json.loads(json.dumps(event.origin, sort_keys=True)) if event.origin else None
    return JobStatus(id=job_id, name=event.name, cluster=event.cluster, kind=event.cluster_kind,
                     run_dir=event.run_dir, created_at=float(event.at), origin=origin,
                     spec_json=event.spec_json, job_file=event.job_file, spec_hash=event.spec_hash,
                     idempotency_key=event.idempotency_key)


def _set_state(status: JobStatus, state: str, reason: str | None, at: float) -> None:
    """A terminal state is final. A success clears the reason a restart left behind; other states
    keep it unless they give one."""
    if status.ended:
        return
    status.state = state
    status.ended_at = at if JobState(state).is_terminal() else None
    if state == JobState.SUCCEEDED.value:
        status.reason = reason
    elif reason is not None:
        status.reason = reason


def _supervisor_started(status: JobStatus, event: SupervisorStarted) -> None:
    status.supervisor_pid = event.pid


def _backend_ref(status: JobStatus, event: Scheduled | AttemptLaunched) -> None:
    status.backend_ref = event.backend_ref


def _attempt_started(status: JobStatus, event: AttemptStarted) -> None:
    if status.ended:  # a supervisor that lost a race with a cancel
        return
    attempt = int(event.attempt)
    status.attempts, status.restarts, status.state = attempt + 1, attempt, JobState.RUNNING.value
    status.attempt_records[attempt] = AttemptRecord(attempt, float(event.at),
                                                    resume_from=event.resume_from,
                                                    resume_step=event.resume_step)
    status.stepped_at = None  # the new attempt has not stepped yet; its window comes with its steps
    status.quiet = status.active_at = None
    status.hang_window_s = status.hang_window_mode = None


def _first_step(status: JobStatus, event: FirstStep) -> None:
    record = status.attempt_records.get(int(event.attempt))
    if record is not None and record.first_step_at is None:
        record.first_step_at = float(event.first_step_at)


def fold_progress(status: JobStatus, event: Progress) -> None:
    """A progress event, from the log or from the supervisor's live file
    (``record.live_progress``)."""
    _stepped(status, event)
    status.progress_step = event.step
    status.progress_loss = finite(event.loss)
    status.progress_loss_source = ((event.loss_source or RUNTIME_LOSS)
                                   if status.progress_loss is not None else None)
    status.progress_loss_step = event.loss_step if status.progress_loss is not None else None
    status.progress_at = event.progress_at
    # The supervisor reports only its current attempt's progress: the latest attempt started.
    status.progress_attempt = status.attempts - 1 if status.attempts else None
    record = (status.attempt_records.get(status.progress_attempt)
              if status.progress_attempt is not None else None)
    if record is not None:
        if record.first_progress_step is None:
            record.first_progress_step = event.step
        record.last_step = event.step
        if event.checkpoint_s is not None:
            record.checkpoint_s = max(record.checkpoint_s, float(event.checkpoint_s))
        record.last_step_at = (float(event.at) if event.progress_at is None
                               else float(event.progress_at))


def _progress(status: JobStatus, event: Progress) -> None:
    """A progress event of the log: as ``fold_progress``, and a sample of the save cadence's
    (the live file's progress, folded in at each read and never kept, is not one)."""
    fold_progress(status, event)
    at = float(event.at) if event.progress_at is None else float(event.progress_at)
    note_progress(status.save_facts, status.progress_attempt, int(event.step), at,
                  measured=event.checkpoint_s is not None)


def _stepped(status: JobStatus, event: Progress) -> None:
    """When the running attempt last stepped, and the seconds per step since its previous step (a
    progress event repeats the step when only the loss changed)."""
    at = float(event.at) if event.progress_at is None else float(event.progress_at)
    previous, since = status.progress_step, status.stepped_at
    if since is not None and previous is not None and event.step == previous:
        return
    if since is not None and previous is not None and event.step > previous and at > since:
        status.step_seconds = [*status.step_seconds[1 - STEP_SAMPLES:],
                               (at - since) / (event.step - previous)]
    status.stepped_at = at


def _hang_window(status: JobStatus, event: HangWindow) -> None:
    status.hang_window_s, status.hang_window_mode = float(event.window_s), event.mode


def _checkpoint(status: JobStatus, event: CheckpointCommitted) -> None:
    status.last_checkpoint_step = event.step
    status.last_checkpoint_path = event.path
    status.last_checkpoint_note = event.step_note if event.step is None else ""
    status.last_checkpoint_at = float(event.at)
    note_checkpoint(status.save_facts, status.attempts - 1 if status.attempts else None,
                    event.step, float(event.at))


def _hang_detection(status: JobStatus, event: HangDetection) -> None:
    status.hang_detection_off = event.off_because


def _failure(status: JobStatus, event: FailureDetected) -> None:
    stalled = None if event.stalled_for_s is None else float(event.stalled_for_s)
    progressed = event.progressed if isinstance(event.progressed, bool) else None
    status.failures.append(Failure(int(event.attempt), event.category, event.evidence,
                                   float(event.at), stalled, event.action, event.hint,
                                   progressed))
    record = status.attempt_records.get(int(event.attempt))
    if record is not None and record.verdict_at is None:
        record.verdict_at, record.stalled_for_s = float(event.at), stalled


def _notice(status: JobStatus, event: Notice) -> None:
    status.notices.append(JobNotice(event.attempt, float(event.at), event.notice, event.message))
    if event.notice == HOST_EXCLUDED and event.host and event.host not in status.excluded_hosts:
        status.excluded_hosts.append(event.host)


def _attempt_ended(status: JobStatus, event: AttemptEnded) -> None:
    record = status.attempt_records.get(int(event.attempt))
    if record is not None:
        record.ended_at, record.exit_code = float(event.at), event.exit_code


def _restarting(status: JobStatus, event: RestartScheduled | AllocationRequeued) -> None:
    _set_state(status, JobState.RESTARTING.value, event.reason, float(event.at))
    if isinstance(event, RestartScheduled):
        status.restart_at = float(event.at) + float(event.delay)
    if isinstance(event, AllocationRequeued) and status.attempt_records:
        status.attempt_records[max(status.attempt_records)].requeued = True


def _state(status: JobStatus, event: StateChanged) -> None:
    was_ended = status.ended
    _set_state(status, event.state, event.reason, float(event.at))
    if status.ended and not was_ended:
        status.finished, status.missing = _finished(status, event)


def _finished(status: JobStatus, event: StateChanged) -> tuple[bool | str, list[str]]:
    """Whether the script finished what it does after its last step, as the end says; an end
    without a word on it (a script that ran to its end, or an older version's log) is True for a
    success, "unknown" for a success after a ``training_complete`` notice (the ranks stopped after
    the last checkpoint), False for any other end."""
    missing = [str(m) for m in event.missing or []]
    if isinstance(event.finished, bool) or event.finished == UNKNOWN:
        return event.finished, missing
    if status.state != JobState.SUCCEEDED.value:
        return False, missing
    stopped = any(n.kind == TRAINING_COMPLETE for n in status.notices)
    return (UNKNOWN if stopped else True), missing


def _fit_estimated(status: JobStatus, event: FitEstimated) -> None:
    status.fit_peak_gib, status.fit_tensor_gib = event.peak_gib, event.tensor_gib
    status.gpu_memory_gib = event.gpu_memory_gib


def _device_peak(status: JobStatus, event: DevicePeak) -> None:
    if status.device_peak_bytes is None or event.peak_bytes > status.device_peak_bytes:
        status.device_peak_bytes = event.peak_bytes
        status.device_peak_rank, status.device_peak_attempt = event.rank, event.attempt



_STEPS: dict[type[Event], Callable[[JobStatus, Any], None]] = {
    SupervisorStarted: _supervisor_started,
    Scheduled: _backend_ref,
    AttemptLaunched: _backend_ref,
    AttemptStarted: _attempt_started,
    FirstStep: _first_step,
    Progress: _progress,
    HangWindow: _hang_window,
    CheckpointCommitted: _checkpoint,
    HangDetection: _hang_detection,
    FailureDetected: _failure,
    Notice: _notice,
    AttemptEnded: _attempt_ended,
    RestartScheduled: _restarting,
    AllocationRequeued: _restarting,
    StateChanged: _state,
    Finished: _state,
    FitEstimated: _fit_estimated,
    DevicePeak: _device_peak,
}

__all__ = ["apply", "fold", "fold_lines"]
