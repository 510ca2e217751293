"""Which ticks of a schedule are due, and which of them run: pure (the caller passes the time).

A tick is *on time* when the scheduler sees it less than ``grace`` seconds after it; older due ticks
were missed (no scheduler ran, or it was stalled). Of the missed ones, the newest ``max_catch_up``
run late and the rest are recorded as missed, never run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

TYPE_CHECKING = False
if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

GRACE_S = 60.0
_COUNT_CAP = 10_000  # missed ticks counted at most (a minutely cron down for a year is 525,600)


def _zone(tz: str) -> ZoneInfo:
    from zoneinfo import ZoneInfo

    return ZoneInfo(tz)


def next_tick(cron: str, tz: str, after: float) -> float:
    """The first tick strictly after ``after`` (epoch seconds)."""
    from croniter import croniter

    start = datetime.fromtimestamp(after, _zone(tz))
    return float(croniter(cron, start).get_next(float))


@dataclass(frozen=True)
class DueTicks:
    """The ticks in (after, now]: the newest few, ascending, and how many there are in all."""

    newest: tuple[float, ...]
    first: float | None  # the oldest due tick
    total: int  # capped at _COUNT_CAP


def due_ticks(cron: str, tz: str, after: float, now: float, keep: int) -> DueTicks:
    """Walks back from ``now``: a long downtime costs the count, never a list of every tick."""
    from croniter import croniter

    first = next_tick(cron, tz, after)
    if first > now:
        return DueTicks((), None, 0)
    walker = croniter(cron, datetime.fromtimestamp(now, _zone(tz)))
    newest: list[float] = []
    total = 0
    # croniter's get_prev is strictly before its start: a tick exactly at ``now`` is due too.
    if next_tick(cron, tz, now - 1) == now:
        newest.append(now)
        total = 1
    while total < _COUNT_CAP:
        tick = float(walker.get_prev(float))
        if tick <= after:
            break
        total += 1
        if len(newest) < keep:
            newest.append(tick)
    return DueTicks(tuple(sorted(newest)), first, total)


@dataclass(frozen=True)
class TickPlan:
    run: tuple[float, ...]  # ascending
    missed_first: float | None  # missed ticks that are not run: the first, the last and how many
    missed_last: float | None
    missed: int

    @property
    def last_handled(self) -> float | None:
        return max([*self.run, *([self.missed_last] if self.missed_last else [])], default=None)


def plan_ticks(cron: str, tz: str, after: float, now: float, max_catch_up: int,
               grace: float = GRACE_S) -> TickPlan:
    due = due_ticks(cron, tz, after, now, keep=max_catch_up + 1)
    if not due.total:
        return TickPlan((), None, None, 0)
    newest = list(due.newest)
    on_time = [newest.pop()] if now - newest[-1] < grace else []
    late = newest[-max_catch_up:] if max_catch_up else []
    run = tuple(late + on_time)
    missed = due.total - len(run)
    if not missed:
        return TickPlan(run, None, None, 0)
    # The missed ticks are the oldest ones: from the first due tick up to the one before the run.
    older = [t for t in due.newest if t not in run]
    last_missed = older[-1] if older else _previous(cron, tz, run[0] if run else now)
    return TickPlan(run, due.first, last_missed, missed)


def _previous(cron: str, tz: str, before: float) -> float:
    from croniter import croniter

    return float(croniter(cron, datetime.fromtimestamp(before, _zone(tz))).get_prev(float))


def local_iso(tick: float, tz: str) -> str:
    """The tick as the schedule's zone writes it: 2026-11-24T03:00:00+01:00."""
    return datetime.fromtimestamp(tick, _zone(tz)).isoformat()


def utc_iso(tick: float) -> str:
    """The tick in UTC, the form idempotency keys use (one per instant, whatever the zone)."""
    return datetime.fromtimestamp(tick, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = ["DueTicks", "GRACE_S", "TickPlan", "due_ticks", "local_iso", "next_tick", "plan_ticks",
           "utc_iso"]
