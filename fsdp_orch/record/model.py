"""What the record says, typed: the events a job's log holds (one dataclass per kind, the one place
their names and fields are written) and ``JobStatus``, what ``status`` shows of a job.

``JobStatus`` is only ever computed by ``record.fold`` from a job's events; the index stores it as
a cache. ``to_json`` is the ``status --json`` document (its keys and their order are the public
format); ``to_record``/``from_record`` keep the fields that only fsdp-orch itself reads (the
supervisor's pid, the backend's reference, each attempt) beside it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fsdp_orch.record.goodput import AttemptRecord, Goodput, account
from fsdp_orch.vocab.states import TERMINAL_NAMES, JobState
from fsdp_orch.vocab.times import iso_time

# --- events ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """What every event has: when (seconds since the epoch), the writer's sequence number, the job."""

    KIND: ClassVar[str] = ""
    at: float = 0.0
    seq: int = 0
    job: str | None = None

    def fields(self) -> dict[str, Any]:
        """The event's own fields, as its log line holds them (``at``, ``kind``, ``seq`` are the writer's)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("at", "seq")}


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
    """Rank 0's step (when it last changed: ``progress_at``) and the latest loss, with where the loss
    came from: ``runtime`` (the heartbeat), else the console format it was read in
    (``observe.console_loss``: ``hf_trainer``, ``lightning``, ``print``)."""

    KIND = "progress"
    step: int = 0
    loss: float | None = None  # None: none reported, or not finite (JSON has no NaN)
    progress_at: float | None = None
    loss_source: str | None = None  # None with a loss: written before sources were (the runtime's)
    checkpoint_s: float | None = None  # rank 0's seconds blocked in the runtime's saves so far in the attempt


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


@dataclass(frozen=True)
class Notice(Event):
    """Something noticed that is not a failure (a checkpoint moved aside, stacks taken, a host lost)."""

    KIND = "notice"
    attempt: int | None = None
    notice: str = ""
    message: str = ""
    host: str | None = None  # with HOST_EXCLUDED: the host (address:port) left out of later attempts


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


@dataclass(frozen=True)
class Finished(StateChanged):
    KIND = "finished"


HOST_EXCLUDED = "host_excluded"  # the notice of a host lost mid-run, left out of later attempts

EVENT_TYPES: dict[str, type[Event]] = {cls.KIND: cls for cls in (
    Submitted, SupervisorStarted, Scheduled, AttemptStarted, AttemptLaunched, FirstStep, Progress,
    HangWindow, CheckpointCommitted, HangDetection, FailureDetected, Notice, AttemptEnded, RestartScheduled,
    AllocationRequeued, StateChanged, Finished)}
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


# --- status ----------------------------------------------------------------------------------

# A running attempt is stalled once its rank 0 has taken no step for STALL_STEPS median step times,
# and for at least STALL_FLOOR_S or half the hang window in force, whichever is shorter (a stall is
# worth telling while the window still runs; steady jitter of a few seconds is not one).
STALL_STEPS = 3
STALL_FLOOR_S = 30.0
STEP_SAMPLES = 15  # the step times kept (seconds per step between progress events)


def stall_threshold(step_seconds: list[float], window_s: float | None) -> float:
    """Seconds without a step after which a running attempt shows as stalled."""
    floor = STALL_FLOOR_S if window_s is None else min(STALL_FLOOR_S, window_s / 2)
    if not step_seconds:
        return floor
    ordered = sorted(step_seconds)  # no statistics import: status starts fast
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return max(floor, STALL_STEPS * median)



@dataclass
class Failure:
    attempt: int
    category: str
    evidence: str | None
    detected_at: float
    stalled_for_s: float | None
    action: str
    hint: str | None

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "category": self.category, "evidence": self.evidence,
                "detected_at": iso_time(self.detected_at), "stalled_for_s": self.stalled_for_s,
                "action": self.action, "hint": self.hint}


@dataclass
class JobNotice:
    attempt: int | None
    at: float
    kind: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "at": iso_time(self.at), "kind": self.kind, "message": self.message}


@dataclass
class JobStatus:
    """A job as its events tell it. Terminal states are final."""

    id: str
    name: str
    cluster: str
    kind: str
    run_dir: str
    created_at: float
    state: str = "PENDING"
    attempts: int = 0
    restarts: int = 0
    ended_at: float | None = None
    last_checkpoint_step: int | None = None
    last_checkpoint_path: str | None = None
    last_checkpoint_note: str = ""  # why its step is not known ("" when it is)
    progress_step: int | None = None
    progress_loss: float | None = None
    progress_loss_source: str | None = None  # "runtime", or the console format (observe.console_loss)
    progress_at: float | None = None
    failures: list[Failure] = field(default_factory=list)
    reason: str | None = None
    hang_detection_off: str | None = None  # why hang detection is off; None: it is on
    hang_window_s: float | None = None  # the running attempt's hang window, once its ranks step
    hang_window_mode: str | None = None  # "fixed" or "adaptive"
    notices: list[JobNotice] = field(default_factory=list)
    origin: dict[str, Any] | None = None
    # Read by fsdp-orch itself, not shown by status.
    spec_json: str = "{}"
    job_file: str | None = None
    spec_hash: str | None = None
    idempotency_key: str | None = None
    supervisor_pid: int | None = None
    backend_ref: str | None = None
    attempt_records: dict[int, AttemptRecord] = field(default_factory=dict)
    excluded_hosts: list[str] = field(default_factory=list)  # address:port, in the order lost
    stepped_at: float | None = None  # the running attempt's last step (None: none yet)
    step_seconds: list[float] = field(default_factory=list)  # recent seconds per step
    progress_attempt: int | None = None  # the attempt whose progress progress_step is
    last_event_at: float = 0.0  # the latest event folded in: what a running job's breakdown is as of

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_NAMES

    @property
    def last_checkpoint(self) -> dict[str, Any] | None:
        """The latest complete checkpoint: its path and step (None, with the reason, when unknown)."""
        if self.last_checkpoint_path is None:
            return None
        return {"path": self.last_checkpoint_path, "step": self.last_checkpoint_step,
                "step_known": self.last_checkpoint_step is not None,
                "step_unknown_because": self.last_checkpoint_note or None}

    @property
    def running(self) -> bool:
        return self.state == JobState.RUNNING.value

    @property
    def stall_from(self) -> float | None:
        """When the running attempt shows as stalled if it takes no step before; None while it is
        not running or has not stepped yet (starting up is not a stall)."""
        if not self.running or self.stepped_at is None:
            return None
        return self.stepped_at + stall_threshold(self.step_seconds, self.hang_window_s)

    def stalled_for_s(self, now: float) -> float | None:
        """Seconds since the running attempt's last step, once that is a stall (``stall_from``)."""
        since = self.stall_from
        if since is None or self.stepped_at is None or now <= since:
            return None
        return round(now - self.stepped_at, 1)

    def goodput(self, now: float | None = None) -> Goodput:
        """Where the wall time went, to the job's end; while it runs, to ``now`` (None: to its latest
        event, what the kept ``status --json`` document says)."""
        if self.ended_at is not None:
            until = self.ended_at
        else:
            until = max(self.created_at, self.last_event_at if now is None else now)
        return account(self.created_at, list(self.attempt_records.values()), until, self.ended)

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        """The ``status --json`` document. ``stalled_for_s`` depends on the time of reading: None
        here without ``now`` (the index keeps that document; ``store`` fills it in as it reads)."""
        progress = None if self.progress_step is None else {
            "step": self.progress_step, "loss": self.progress_loss, "loss_source": self.progress_loss_source,
            "updated_at": iso_time(self.progress_at)}
        return {
            "id": self.id, "name": self.name, "cluster": self.cluster, "state": self.state,
            "attempts": self.attempts, "restarts": self.restarts,
            "created_at": iso_time(self.created_at), "ended_at": iso_time(self.ended_at),
            "last_checkpoint_step": self.last_checkpoint_step, "last_checkpoint": self.last_checkpoint,
            "progress": progress,
            "stalled_for_s": None if now is None else self.stalled_for_s(now),
            "hang_window_s": self.hang_window_s if self.running else None,
            "failures": [f.to_json() for f in self.failures],
            "reason": self.reason, "run_dir": self.run_dir,
            "hang_detection": {"enabled": self.hang_detection_off is None, "reason": self.hang_detection_off},
            "events": [n.to_json() for n in self.notices],
            "origin": self.origin,
            "goodput": self.goodput_json(),
        }

    def goodput_json(self) -> dict[str, Any]:
        """The breakdown to the job's end, or while it runs to its latest event: the same at any time
        of reading, so the index keeps it as the fold gives it."""
        return self.goodput().to_json(running=not self.ended)

    def to_record(self) -> dict[str, Any]:
        """Every field, for the index to keep and give back (``from_record``)."""
        record = dataclasses.asdict(self)
        record["attempt_records"] = list(record["attempt_records"].values())
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> JobStatus:
        data = dict(record)
        data["failures"] = [Failure(**f) for f in data.get("failures") or []]
        data["notices"] = [JobNotice(**n) for n in data.get("notices") or []]
        data["attempt_records"] = {int(a["attempt"]): AttemptRecord(**a) for a in data.get("attempt_records") or []}
        return cls(**data)


__all__ = ["EVENT_TYPES", "HOST_EXCLUDED", "AllocationRequeued", "AttemptEnded", "AttemptLaunched",
           "AttemptRecord", "AttemptStarted", "CheckpointCommitted", "Event", "Failure", "FailureDetected",
           "Finished", "FirstStep", "HangDetection", "HangWindow", "JobNotice", "JobStatus", "Notice", "Progress",
           "RUNTIME_LOSS", "RestartScheduled", "Scheduled", "StateChanged", "Submitted", "SupervisorStarted",
           "finite", "parse_event", "stall_threshold"]
