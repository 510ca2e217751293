"""Which notifications a job's events call for: pure (events and webhooks in, notifications out)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.states import TERMINAL_NAMES

_STATE_OF_KIND = {"submitted": "PENDING", "attempt_started": "RUNNING", "restart_scheduled": "RESTARTING",
                  "allocation_requeued": "RESTARTING"}


@dataclass(frozen=True)
class Due:
    hook: int  # index in the webhook list
    trigger: str  # the state entered, or the event kind
    at: float  # when it happened
    key: str  # the same notification always has the same key (the ledger's)
    event: dict[str, Any]


def changes(events: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(trigger, event) in time order: each state the job enters (as ``status`` derives it: a
    repeated state is no change, nothing after the end counts) and each event by its kind."""
    found: list[tuple[str, dict[str, Any]]] = []
    state: str | None = None
    for event in events:
        if state in TERMINAL_NAMES:
            break
        kind = event.get("kind")
        new = str(event["state"]) if kind in ("state", "finished") else _STATE_OF_KIND.get(str(kind))
        if kind not in ("submitted", "state", "finished", "attempt_started"):
            found.append((str(kind), event))
        if new is not None and new != state:
            state = new
            found.append((new, event))
    return found


def due(events: list[dict[str, Any]], hooks: list[Webhook], done: set[str]) -> list[Due]:
    """The notifications not yet delivered or given up (``done``: their keys), oldest first."""
    result = []
    for trigger, event in changes(events):
        for i, hook in enumerate(hooks):
            if trigger in hook.when:
                key = f"{i}|{trigger}|{event['at']!r}|{event.get('seq')}"
                if key not in done:
                    result.append(Due(i, trigger, float(event["at"]), key, event))
    return result


__all__ = ["Due", "changes", "due"]
