"""Which notifications a job's events call for: pure (events, webhooks and the ledger in,
notifications out). The job's state is the one ``record.fold`` derives, so a webhook hears of the
same states ``status`` shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.record.event_types import parse_event
from fsdp_orch.record.fold import apply, fold_lines
from fsdp_orch.record.status import JobStatus


@dataclass(frozen=True)
class Logged:
    """An event and the event file it was read from: (file name, seq) is its identity."""

    writer: str
    event: dict[str, Any]


@dataclass(frozen=True)
class Change:
    trigger: str  # the state entered, or the event's kind
    logged: Logged

    @property
    def is_state(self) -> bool:
        return self.trigger.isupper()


@dataclass(frozen=True)
class Due:
    hook: int  # index in the webhook list
    change: Change
    key: str  # the ledger's: the same notification always has the same key

    @property
    def trigger(self) -> str:
        return self.change.trigger

    @property
    def at(self) -> float:
        return float(self.change.logged.event["at"])

    @property
    def event(self) -> dict[str, Any]:
        return self.change.logged.event


def changes(events: list[Logged]) -> list[Change]:
    """In order: each state the job enters (a repeated state is no change; nothing after its end
    counts) and each event by its kind."""
    status: JobStatus | None = None
    found: list[Change] = []
    for logged in events:
        if status is not None and status.ended:
            break
        before = status.state if status is not None else None
        event = parse_event(logged.event)
        if event is not None:
            status = apply(status, event, str(logged.event.get("job") or ""))
        found.append(Change(str(logged.event["kind"]), logged))
        if status is not None and status.state != before:
            found.append(Change(status.state, logged))
    return found


def notification_key(hook: int, change: Change) -> str:
    event = change.logged.event
    return f"{hook}|{change.trigger}|{change.logged.writer}|{event.get('seq')}"


def due(events: list[Logged], hooks: list[Webhook], done: set[str]) -> list[Due]:
    """The notifications not yet delivered or given up (``done``: their keys), oldest first."""
    result = []
    for change in changes(events):
        for i, hook in enumerate(hooks):
            if change.trigger in hook.when:
                key = notification_key(i, change)
                if key not in done:
                    result.append(Due(i, change, key))
    return result


def ended(events: list[Logged]) -> bool:
    status = fold_lines([logged.event for logged in events], "", None)
    return status is not None and status.ended


__all__ = ["Change", "Due", "Logged", "changes", "due", "ended", "notification_key"]
