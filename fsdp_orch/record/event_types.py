"""The events a job's log holds, typed: one dataclass per kind, the one place their names and fields
are written (``record.events`` writes and reads the lines; ``record.fold`` folds them into a
``record.status.JobStatus``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Event:
    """What every event has: when (seconds since the epoch),
    the writer's sequence number, the job."""

    KIND: ClassVar[str] = ""
    at: float = 0.0
    seq: int = 0
    job: str | None = None

    def fields(self) -> dict[str, Any]:
        """The event's own fields, as its log line holds them (``at``,
        ``kind``, ``seq`` are the writer's)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("at", "seq")}


@dataclass(frozen=True)
class Submitted(Event):
    KIND = "submitted"
    name: str = ""
    cluster: str = ""
    cluster_kind: str = "local"
    spec_json: str = "{}"
    run_dir: str = ""
    job_file: str | None = None
    spec_hash: str | None = None
    idempotency_key: str | None = None
    origin: dict[str, Any] | None = None  # the schedule and tick, the checkpoint it started from


@dataclass(frozen=True)
class SupervisorStarted(Event):
    KIND = "supervisor_started"
    pid: int | None = None
    host: str | None = None


@dataclass(frozen=True)
class Scheduled(Event):
    """Handed to the scheduler (a SLURM job id)."""

    KIND = "scheduled"
    backend_ref: str | None = None


@dataclass(frozen=True)
class AttemptStarted(Event):
    KIND = "attempt_started"
    attempt: int = 0
    resume_from: str | None = None
    resume_step: int | None = None  # the step of the checkpoint it resumes from, when known


@dataclass(frozen=True)
class AttemptLaunched(Event):
    KIND = "attempt_launched"
    attempt: int = 0
    backend_ref: str | None = None


@dataclass(frozen=True)
class FirstStep(Event):
    """When the attempt's first training step was seen (recovery time is measured to here)."""

    KIND = "first_step"
    attempt: int = 0
    first_step_at: float = 0.0


RUNTIME_LOSS = "runtime"  # a loss the fsdp_orch runtime put in rank 0's heartbeat


@dataclass(frozen=True)
class Progress(Event):
    """Rank 0's step (when it last changed: ``progress_at``) and the latest loss, with where the
    loss came from: ``runtime`` (the heartbeat), else the console format it was read in
    (``observe.console_loss``: ``hf_trainer``, ``lightning``, ``print``)."""

    KIND = "progress"
    step: int = 0
    loss: float | None = None  # None: none reported, or not finite (JSON has no NaN)
    progress_at: float | None = None
    loss_source: str | None = None  # None with a loss: written before sources were (the runtime's)
    # rank 0's seconds blocked in the runtime's saves so far in the attempt
    checkpoint_s: float | None = None
    # the step the loss belongs to (the one its console line names, else rank 0's when it was
    # read); None: ``step`` (and in logs of older versions)
    loss_step: int | None = None


@dataclass(frozen=True)
class HangWindow(Event):
    """The hang window in force for the attempt's ranks once they step: ``watch.heartbeat_timeout``
    (``fixed``, and ``warm-up`` until the ranks have timed a few steps) or the adaptive window
    (``adaptive``). Written when it first applies in an attempt, when its mode changes and when it
    moves by more than a fifth."""

    KIND = "hang_window"
    attempt: int = 0
    window_s: float = 0.0
    mode: str = "fixed"


@dataclass(frozen=True)
class CheckpointCommitted(Event):
    KIND = "checkpoint_committed"
    step: int | None = 0  # None: a checkpoint.file whose step neither its name nor content tells
    path: str | None = None
    step_note: str = ""  # why the step is not known


@dataclass(frozen=True)
class FitEstimated(Event):
    """``fsdp-orch fit``'s estimate for the job as submitted (``submit``'s check): each GPU's peak,
    the part of it in tensors (what ``max_memory_allocated`` measures), the GPUs' memory."""

    KIND = "fit_estimated"
    peak_gib: float = 0.0
    tensor_gib: float = 0.0
    gpu_memory_gib: float | None = None


@dataclass(frozen=True)
class DevicePeak(Event):
    """The most accelerator memory a rank of the attempt held in tensors so far (its heartbeat's
    ``device_peak``): written when it first shows and when it grows by more than 1%."""

    KIND = "device_peak"
    attempt: int = 0
    rank: int = 0
    peak_bytes: int = 0


@dataclass(frozen=True)
class HangDetection(Event):
    KIND = "hang_detection"
    off_because: str | None = None  # None: hang detection is on


@dataclass(frozen=True)
class FailureDetected(Event):
    """A failure, explained where it was found: its category, the deciding evidence, what the
    supervisor does about it and what the user can do (``hint``)."""

    KIND = "failure_detected"
    attempt: int = 0
    category: str = ""
    evidence: str | None = None
    action: str = ""
    stalled_for_s: float | None = None
    hint: str | None = None
    # whether its attempt completed a new checkpoint (or, with none yet, reached a new step): the
    # restart budget counts failures without progress; None in logs of older versions
    progressed: bool | None = None


@dataclass(frozen=True)
class Notice(Event):
    """Something noticed that is not a failure (a checkpoint moved
    aside, stacks taken, a host lost)."""

    KIND = "notice"
    attempt: int | None = None
    notice: str = ""
    message: str = ""
    # with HOST_EXCLUDED: the host (address:port) left out of later attempts
    host: str | None = None


@dataclass(frozen=True)
class AttemptEnded(Event):
    KIND = "attempt_ended"
    attempt: int = 0
    exit_code: int | None = None


@dataclass(frozen=True)
class RestartScheduled(Event):
    KIND = "restart_scheduled"
    reason: str | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class AllocationRequeued(Event):
    KIND = "allocation_requeued"
    reason: str | None = None


@dataclass(frozen=True)
class StateChanged(Event):
    """Any other change of state (``state``), or the job's end (``finished``: a terminal state)."""

    KIND = "state"
    state: str = ""
    reason: str | None = None
    # At the job's end, when the supervisor stopped its ranks after the last checkpoint: whether
    # the script's final outputs are there (True, False, "unknown": checkpoints.final_outputs) and
    # what is missing; None: the script ran to its end (or an older version's log).
    finished: bool | str | None = None
    missing: list[str] | None = None


@dataclass(frozen=True)
class Finished(StateChanged):
    KIND = "finished"


HOST_EXCLUDED = "host_excluded"  # the notice of a host lost mid-run, left out of later attempts
STRAGGLER = "straggler"  # the notice of a rank its peers keep waiting for (decide.stragglers)
# the notice of a save cadence that loses noticeably more than the best one (record.save_cadence)
SAVE_CADENCE = "save_cadence"

EVENT_TYPES: dict[str, type[Event]] = {cls.KIND: cls for cls in (
    Submitted, SupervisorStarted, Scheduled, AttemptStarted, AttemptLaunched, FirstStep, Progress,
    HangWindow, CheckpointCommitted, HangDetection, FailureDetected, Notice, AttemptEnded,
    RestartScheduled, AllocationRequeued, StateChanged, Finished, FitEstimated, DevicePeak)}
_FIELDS = {kind: {f.name for f in dataclasses.fields(cls)} for kind, cls in EVENT_TYPES.items()}


def parse_event(line: dict[str, Any]) -> Event | None:
    """A log line (already JSON-decoded, with ``kind`` and ``at``) as its event; None for a kind
    this version does not know (a newer writer's): readers pass over it."""
    cls = EVENT_TYPES.get(line["kind"])
    if cls is None:
        return None
    known = _FIELDS[line["kind"]]
    return cls(**{k: v for k, v in line.items() if k in known})


def finite(value: float | None) -> float | None:
    """A loss as the record keeps it: JSON has no NaN or infinity, so a diverged loss is None."""
    if value is None:
        return None
    loss = float(value)
    return loss if loss == loss and abs(loss) != float("inf") else None
