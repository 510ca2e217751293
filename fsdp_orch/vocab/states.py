"""Job states and their lifecycle.

PENDING -> RUNNING -> (RESTARTING -> RUNNING)* -> SUCCEEDED | FAILED | CANCELLED
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
TERMINAL_NAMES = tuple(s.value for s in TERMINAL)
