"""The restart budget as ``status`` and ``submit --wait`` show it: the restarts so far (against
``restart.max_restarts``, a hard cap, when one is set) and the failures in a row without progress
against ``restart.crash_loop_attempts``, the count that stops a job that does not move forward.
Pure: from a job's failures and its spec."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fsdp_orch.vocab.categories import FailureCategory

DEFAULT_CRASH_LOOP_ATTEMPTS = 3  # the job spec's default (jobspec.schema.RestartPolicy)
# The failures the restart policy decided on (a requeue by the scheduler uses no budget).
_DECIDED = ("restart", "give_up")
_NOT_COUNTED = (FailureCategory.STRAGGLER_REPLACED,)


class _Failure(Protocol):
    attempt: int
    category: str
    action: str
    progressed: bool | None


@dataclass(frozen=True)
class RestartBudget:
    restarts: int
    max_restarts: int | None  # None: no cap
    without_progress: int  # failures in a row, the latest last, whose attempt made no progress
    limit: int  # restart.crash_loop_attempts: the job stops at this many

    def text(self) -> str:
        """``restart 7; without progress 1 of 3`` (``restart 7 of 10; ...`` with a cap)."""
        cap = "" if self.max_restarts is None else f" of {self.max_restarts}"
        return f"restart {self.restarts}{cap}; without progress {self.without_progress} of " \
               f"{self.limit}"

    def to_json(self) -> dict[str, Any]:
        return {"restarts": self.restarts, "max_restarts": self.max_restarts,
                "failures_without_progress": self.without_progress,
                "crash_loop_attempts": self.limit}


def failures_without_progress(failures: Sequence[_Failure]) -> int:
    """The failures since the last one whose attempt made progress (a log of an older version,
    which does not say, counts from there)."""
    count = 0
    for failure in reversed(failures):
        if failure.action not in _DECIDED or failure.category in _NOT_COUNTED:
            continue
        if failure.progressed is not False:
            break
        count += 1
    return count


def restart_budget(spec_json: str, attempts: int, failures: Sequence[_Failure]) -> RestartBudget:
    """The budget of a job with ``attempts`` attempts so far."""
    try:
        restart = json.loads(spec_json).get("restart") or {}
    except (ValueError, AttributeError):
        restart = {}
    cap = restart.get("max_restarts")
    limit = restart.get("crash_loop_attempts", DEFAULT_CRASH_LOOP_ATTEMPTS)
    requeued = len({f.attempt for f in failures if f.action == "requeue"})
    return RestartBudget(max(0, attempts - 1 - requeued), cap if isinstance(cap, int) else None,
                         failures_without_progress(failures),
                         limit if isinstance(limit, int) else DEFAULT_CRASH_LOOP_ATTEMPTS)


__all__ = ["RestartBudget", "failures_without_progress", "restart_budget"]
