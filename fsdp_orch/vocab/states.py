"""Job states and their lifecycle.

PENDING -> RUNNING -> (RESTARTING -> RUNNING)* -> SUCCEEDED | INCOMPLETE | FAILED | CANCELLED

INCOMPLETE: the training reached its last checkpoint and is not trained again, but what the script
writes after it is missing (a Trainer's final model: ``checkpoints.final_outputs``); ``status
--json``'s ``missing`` names it, and ``submit --wait`` exits 1 as for a failure.
"""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A word of fsdp-orch's vocabulary: an enum member that is its string everywhere, on disk, in
    JSON and in text (``f"{JobState.RUNNING}"`` is ``RUNNING``,
    as ``enum.StrEnum`` from 3.11 has it)."""

    __str__ = str.__str__

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)


class JobState(Word):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    SUCCEEDED = "SUCCEEDED"
    INCOMPLETE = "INCOMPLETE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    # its submission event is unreadable: found by its run folder, cancellable (record/broken.py)
    BROKEN = "BROKEN"

    def is_terminal(self) -> bool:
        return self in TERMINAL


class HeartbeatState(Word):
    """A rank's heartbeat ``state`` (``fsdp_orch.observe.heartbeats``)."""

    STARTING = "starting"  # process group up, no step done yet
    TRAINING = "training"
    SAVING = "saving"  # inside a checkpoint save: slow, not hung
    DONE = "done"  # returned from training


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.INCOMPLETE, JobState.FAILED,
                      JobState.CANCELLED})
TERMINAL_NAMES = tuple(s.value for s in TERMINAL)

# JobStatus.finished when nothing tells whether the script wrote what it writes after its last step
FINISHED_UNKNOWN = "unknown"
# the notice of a job not trained past its last checkpoint (supervise.supervisor)
TRAINING_COMPLETE = "training_complete"
# the notice of why an attempt's nodes do not all run yet, in the cluster's words
# (supervise.attempt_notices); history once the attempt has stepped
WAITING = "waiting"
