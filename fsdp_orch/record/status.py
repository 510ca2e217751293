"""``JobStatus``, what ``status`` shows of a job.

It is only ever computed by ``record.fold`` from a job's events (``record.event_types``); the index
stores it as a cache. ``to_json`` is the ``status --json`` document (its keys and their order are
the public format); ``to_record``/``from_record`` keep the fields that only fsdp-orch itself reads
(the supervisor's pid, the backend's reference, each attempt) beside it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fsdp_orch.record.goodput import AttemptRecord, Goodput, account
from fsdp_orch.record.restart_budget import restart_budget
from fsdp_orch.record.save_cadence import SaveFacts, summarize
from fsdp_orch.vocab.states import TERMINAL_NAMES, JobState
from fsdp_orch.vocab.times import iso_time

# A running attempt is stalled once its rank 0 has taken no step for STALL_STEPS median step times,
# and for at least STALL_FLOOR_S or half the hang window in force, whichever is shorter (a stall is
# worth telling while the window still runs; steady jitter of a few seconds is not one).
STALL_STEPS = 3
STALL_FLOOR_S = 30.0
# Never shorter than twice what the step status reads can lag the ranks' (the supervisor's poll,
# 1 s, its live file, LIVE_EVERY_S, a rank's heartbeat write, 0.2 s): a stepping job is not stalled.
STALL_MIN_S = 3.0
STEP_SAMPLES = 15  # the step times kept (seconds per step between progress events)


def stall_threshold(step_seconds: list[float], window_s: float | None) -> float:
    """Seconds without a step after which a running attempt shows as stalled."""
    floor = STALL_FLOOR_S if window_s is None else max(STALL_MIN_S,
                                                       min(STALL_FLOOR_S, window_s / 2))
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
    progressed: bool | None = None  # its attempt made progress (None: an older version's log)

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "category": self.category, "evidence": self.evidence,
                "detected_at": iso_time(self.detected_at), "stalled_for_s": self.stalled_for_s,
                "action": self.action, "hint": self.hint, "progressed": self.progressed}


@dataclass
class JobNotice:
    attempt: int | None
    at: float
    kind: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "at": iso_time(self.at), "kind": self.kind,
                "message": self.message}


@dataclass
class JobStatus:
    """A job as its events tell it. Terminal states are final."""

    id: str
    name: str
    cluster: str
    kind: str
    run_dir: str
    created_at: float
    state: str = JobState.PENDING.value
    attempts: int = 0
    restarts: int = 0
    ended_at: float | None = None
    last_checkpoint_step: int | None = None
    last_checkpoint_path: str | None = None
    last_checkpoint_note: str = ""  # why its step is not known ("" when it is)
    last_checkpoint_at: float | None = None  # when it was committed (not shown: metrics' age)
    progress_step: int | None = None
    progress_loss: float | None = None
    # "runtime", or the console format (observe.console_loss)
    progress_loss_source: str | None = None
    progress_loss_step: int | None = None  # the step the loss belongs to (None: progress_step)
    progress_at: float | None = None
    failures: list[Failure] = field(default_factory=list)
    reason: str | None = None
    # Once the job ended: whether the script finished what it does after its last step (True:
    # it ran to its end, or its final outputs were found; False: it did not, ``missing`` says what
    # is not there; "unknown": its ranks were stopped after the last checkpoint and nothing tells
    # what it writes at its end). None while it runs.
    finished: bool | str | None = None
    missing: list[str] = field(default_factory=list)
    hang_detection_off: str | None = None  # why hang detection is off; None: it is on
    hang_window_s: float | None = None  # the running attempt's hang window, once its ranks step
    hang_window_mode: str | None = None  # "fixed" or "adaptive"
    notices: list[JobNotice] = field(default_factory=list)
    origin: dict[str, Any] | None = None
    # fsdp-orch fit's estimate at submit (GiB a GPU: the whole peak, the part in tensors) and the
    # GPUs' memory it was judged against; the most any rank held in tensors (device_peak)
    fit_peak_gib: float | None = None
    fit_tensor_gib: float | None = None
    gpu_memory_gib: float | None = None
    device_peak_bytes: int | None = None
    device_peak_rank: int | None = None
    device_peak_attempt: int | None = None
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
    # From the supervisor's live file only, never kept: why the running attempt takes no step and
    # is not stalled ("saving": a rank saves a checkpoint; "finishing": a rank returned from its
    # script, the rest is the processes' teardown), and the last progress of any rank (a step, or
    # a save begun or ended).
    quiet: str | None = None
    active_at: float | None = None
    hang_held: str | None = None  # why the hang rule holds its verdict back (record.hang_hold)
    step_seconds: list[float] = field(default_factory=list)  # recent seconds per step
    progress_attempt: int | None = None  # the attempt whose progress progress_step is
    # the latest event folded in: what a running job's breakdown is as of
    last_event_at: float = 0.0
    restart_at: float | None = None  # when a scheduled restart's backoff ends (RESTARTING)
    save_facts: SaveFacts = field(default_factory=SaveFacts)  # the saves' cadence and cost

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_NAMES

    @property
    def last_checkpoint(self) -> dict[str, Any] | None:
        """The latest complete checkpoint: its path and step (None,
        with the reason, when unknown)."""
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
        not running, has not stepped yet (starting up is not a stall) or is ``quiet`` (saving, or
        finishing)."""
        if not self.running or self.stepped_at is None or self.quiet is not None:
            return None
        return self._progressed_at + stall_threshold(self.step_seconds, self.hang_window_s)

    @property
    def _progressed_at(self) -> float:
        assert self.stepped_at is not None
        return self.stepped_at if self.active_at is None else max(self.stepped_at, self.active_at)

    def stalled_for_s(self, now: float) -> float | None:
        """Seconds since the running attempt's last progress, once that is a stall
        (``stall_from``)."""
        since = self.stall_from
        if since is None or now <= since:
            return None
        return round(now - self._progressed_at, 1)

    def goodput(self, now: float | None = None) -> Goodput:
        """Where the wall time went, to the job's end; while it runs, to ``now`` (None:
        to its latest event, what the kept ``status --json`` document says)."""
        return account(self.created_at, list(self.attempt_records.values()),
                       self.goodput_until(now), self.ended)

    def goodput_until(self, now: float | None = None) -> float:
        """The end of the time accounted: the job's end; while it runs, ``now`` (None: its latest
        event)."""
        if self.ended_at is not None:
            return self.ended_at
        return max(self.created_at, self.last_event_at if now is None else now)

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        """The ``status --json`` document. ``stalled_for_s`` depends on the time of reading: None
        here without ``now`` (the index keeps that document; ``store`` fills it in as it reads)."""
        progress = None if self.progress_step is None else {
            "step": self.progress_step, "loss": self.progress_loss,
            "loss_source": self.progress_loss_source,
            "loss_step": (None if self.progress_loss is None
                          else self.progress_step if self.progress_loss_step is None
                          else self.progress_loss_step),
            "updated_at": iso_time(self.progress_at)}
        return {
            "id": self.id, "name": self.name, "cluster": self.cluster, "state": self.state,
            "attempts": self.attempts, "restarts": self.restarts,
            "created_at": iso_time(self.created_at), "ended_at": iso_time(self.ended_at),
            "last_checkpoint_step": self.last_checkpoint_step,
            "last_checkpoint": self.last_checkpoint,
            "progress": progress,
            "stalled_for_s": None if now is None else self.stalled_for_s(now),
            "hang_window_s": self.hang_window_s if self.running else None,
            "hang_held": self.hang_held if self.running else None,
            "failures": [f.to_json() for f in self.failures],
            "reason": self.reason, "finished": self.finished, "missing": list(self.missing),
            "run_dir": self.run_dir,
            "left_out": list(self.excluded_hosts),
            "hang_detection": {"enabled": self.hang_detection_off is None,
                               "reason": self.hang_detection_off},
            "events": [n.to_json() for n in self.notices],
            "origin": self.origin,
            "goodput": self.goodput_json(),
            "memory": self.memory_json(),
            "save_cadence": self.save_cadence_json(),
            "restart_budget": restart_budget(self.spec_json, self.attempts,
                                             self.failures).to_json(),
        }

    def memory_json(self) -> dict[str, Any] | None:
        """Each GPU's memory: ``fit``'s estimate at submit beside the peak the ranks measured
        (on CUDA, ``max_memory_allocated``: tensors only, so set beside the estimate's tensor
        part); None when neither is known."""
        if self.fit_peak_gib is None and self.device_peak_bytes is None:
            return None
        measured = (None if self.device_peak_bytes is None
                    else round(self.device_peak_bytes / (1 << 30), 2))
        return {"estimated_peak_gib_per_gpu": self.fit_peak_gib,
                "estimated_tensor_gib_per_gpu": self.fit_tensor_gib,
                "gpu_memory_gib": self.gpu_memory_gib,
                "measured_tensor_gib_per_gpu": measured,
                "measured_rank": self.device_peak_rank,
                "measured_attempt": self.device_peak_attempt}

    def save_cadence_json(self) -> dict[str, Any] | None:
        """What the save cadence costs and the interval that would cost least at the failure rate
        seen (``record.save_cadence``), to the job's end or its latest event, as ``goodput``;
        None before its first complete checkpoint."""
        return summarize(self.save_facts, list(self.attempt_records.values()), self.failures,
                         self.goodput_until())

    def goodput_json(self) -> dict[str, Any]:
        """The breakdown to the job's end, or while it runs to its latest event:
        the same at any time of reading, so the index keeps it as the fold gives it."""
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
        data["attempt_records"] = {int(a["attempt"]): AttemptRecord(**a)
                                   for a in data.get("attempt_records") or []}
        data["save_facts"] = SaveFacts.from_record(data.get("save_facts"))
        return cls(**data)
