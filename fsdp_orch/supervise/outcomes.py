"""How an attempt ended, as the supervisor's loop reads it: values, not exceptions. The watch of an
attempt (``attempt_watch``) returns one; the loop (``restart_loop``) decides on it."""

from __future__ import annotations

from dataclasses import dataclass

from fsdp_orch.backends.base import AttemptHandle
from fsdp_orch.decide.policy import FailureRecord
from fsdp_orch.supervise.diagnose import Diagnosis


@dataclass(frozen=True)
class Succeeded:
    """The attempt exited 0 with its ranks started."""


@dataclass(frozen=True)
class TornDown:
    """Every rank finished its script, then the processes failed or hung while they shut down (gloo,
    NCCL): the attempt counts as done. ``how``: the event kind recorded
    (teardown_crash, teardown_hang)."""

    how: str


@dataclass(frozen=True)
class Cancelled:
    """A cancel was asked for (``fsdp-orch cancel``, or SIGTERM/SIGINT to the supervisor)."""


@dataclass(frozen=True)
class Failed:
    """The attempt failed: its diagnosis (a node lost is ``preemption_or_node_lost``), when it was
    judged, how long the ranks had stalled (a hang), the latest complete checkpoint before and after
    it, the hosts its handle found lost (address:port), and the step every rank had reached when
    one of them returned from its script (``returned_step``: the job's last, by its own count).
    ``taken``: the cluster took the attempt's nodes (``EngineEnding.taken``): no budget is used."""

    diagnosis: Diagnosis
    detected_at: float
    stalled_for_s: float | None
    checkpoint_before: int | None
    checkpoint_after: int | None
    lost_hosts: tuple[str, ...] = ()
    returned_step: int | None = None
    taken: bool = False

    def record(self, attempt: int, step_before: int | None = None,
               step_after: int | None = None) -> FailureRecord:
        """What the restart policy weighs of it: ``step_before``, the highest step the attempts
        before it reached, and ``step_after``, its own."""
        return FailureRecord(attempt, self.diagnosis.category, self.checkpoint_before,
                             self.checkpoint_after, step_before, step_after,
                             counted=not self.taken)


Outcome = Succeeded | TornDown | Cancelled | Failed


class CancelledError(Exception):
    """Raised by a backoff sleep cut short by a cancel (the sleep is
    injected; it cannot return one)."""


@dataclass
class Adopt:
    """Re-attaching: the attempt already running (started by a supervisor that died)."""

    attempt: int
    handle: AttemptHandle
    started_at: float  # when the first supervisor started it (from the job's events)
    first_step_at: float | None = None  # its first step, when one was recorded already
