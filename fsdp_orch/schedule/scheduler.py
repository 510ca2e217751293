"""The scheduler: at each pass, every active schedule's due ticks are submitted, skipped or recorded
as missed. The clock and sleep are injected; the jobs are reached through ``ScheduledJobs``.

Crash safety: a tick's job is submitted with the tick as its idempotency key before the tick is
recorded as handled, so a scheduler killed between the two finds that job again on restart (the key
is taken) and records it, never submitting the tick twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from fsdp_orch.jobspec.schedule import Schedule
from fsdp_orch.schedule.book import ScheduleBook, ScheduleState
from fsdp_orch.schedule.decide import decide, tick_key
from fsdp_orch.schedule.ticks import local_iso, next_tick, plan_ticks, utc_iso
from fsdp_orch.vocab.errors import FsdpOrchError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsdp_orch.record.events import EventWriter

MAX_SLEEP_S = 60.0  # a schedule added or resumed meanwhile is seen within a minute


class ScheduledJobs(Protocol):
    def existing(self, key: str) -> str | None: ...

    def active(self, job_ids: list[str]) -> list[str]:
        """Those of ``job_ids`` not yet ended."""
        ...

    def succeeded(self, job_ids: list[str]) -> list[str]: ...

    def submit(self, schedule: Schedule, key: str, origin: dict[str, str],
               init_from: str | None) -> str: ...

    def cancel(self, job_id: str) -> None: ...


@dataclass(frozen=True)
class Outcome:
    schedule: str
    tick: str  # local ISO
    action: str  # submitted, skipped, missed, failed
    job: str | None = None
    detail: str | None = None

    def line(self) -> str:
        text = f"{self.tick} {self.schedule}: {self.action}"
        if self.job:
            text += f" {self.job}"
        return text + (f" ({self.detail})" if self.detail else "")


class Scheduler:
    def __init__(self, book: ScheduleBook, jobs: ScheduledJobs, clock: Callable[[], float],
                 sleep: Callable[[float], None], say: Callable[[str], None] = lambda line: None):
        self.book = book
        self.jobs = jobs
        self.clock = clock
        self.sleep = sleep
        self.say = say

    def run_due(self) -> list[Outcome]:
        """One pass over every schedule at the clock's time."""
        now = self.clock()
        outcomes: list[Outcome] = []
        for schedule in self.book.all():
            if not schedule.paused:
                outcomes += self._run_schedule(schedule, now)
        for outcome in outcomes:
            self.say(outcome.line())
        return outcomes

    def next_wake(self) -> float:
        now = self.clock()
        ticks = [next_tick(s.cron, s.tz, max(now, s.active_since)) for s in self.book.all()
                 if not s.paused]
        return min([now + MAX_SLEEP_S, *ticks])

    def run_forever(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        while not should_stop():
            self.run_due()
            delay = self.next_wake() - self.clock()
            if delay > 0:
                self.sleep(delay)

    def _run_schedule(self, schedule: Schedule, now: float) -> list[Outcome]:
        state = self.book.state(schedule.name)
        after = max(state.last_tick if state.last_tick is not None else schedule.active_since,
                    schedule.active_since)
        plan = plan_ticks(schedule.cron, schedule.tz, after, now, schedule.max_catch_up)
        outcomes: list[Outcome] = []
        events = None

        def journal() -> EventWriter:
            nonlocal events
            events = events or self.book.writer(schedule.name, "scheduler", self.clock)
            return events

        if plan.missed:
            first, last = (local_iso(plan.missed_first or 0, schedule.tz),
                           local_iso(plan.missed_last or 0, schedule.tz))
            journal().append("ticks_missed", first=first, last=last, count=plan.missed,
                             max_catch_up=schedule.max_catch_up)
            state.last_tick = max(state.last_tick or 0, plan.missed_last or 0)
            self.book.save_state(schedule.name, state)
            outcomes.append(Outcome(schedule.name, last, "missed",
                                    detail=f"{plan.missed} tick(s) from {first}; "
                                           "no scheduler ran then"))
        for tick in plan.run:
            outcomes.append(self._run_tick(schedule, state, tick, journal))
            state.last_tick = tick
            self.book.save_state(schedule.name, state)
        return outcomes

    def _run_tick(self, schedule: Schedule, state: ScheduleState,
                  tick: float, journal: Callable[[], EventWriter]) -> Outcome:
        shown = local_iso(tick, schedule.tz)
        key = tick_key(schedule.name, utc_iso(tick))
        done = self.jobs.existing(key)
        if done is not None:  # submitted before a crash, not yet recorded
            state.add_run(tick, done)
            return Outcome(schedule.name, shown, "submitted", done, "found after a restart")
        runs = [r["job"] for r in state.runs]
        action = decide(schedule.concurrency, self.jobs.active(runs))
        if not action.submit:
            journal().append("tick_skipped", tick=shown, reason=action.reason)
            return Outcome(schedule.name, shown, "skipped", detail=action.reason)
        for job_id in action.cancel:
            self.jobs.cancel(job_id)
            journal().append("run_replaced", tick=shown, cancelled=job_id)
        init_from = None
        if schedule.init_from_previous:
            done_runs = self.jobs.succeeded(runs)
            init_from = done_runs[-1] if done_runs else None
        origin = {"schedule": schedule.name, "tick": shown}
        try:
            job_id = self.jobs.submit(schedule, key, origin, init_from)
        except FsdpOrchError as exc:
            journal().append("tick_failed", tick=shown, error=str(exc))
            return Outcome(schedule.name, shown, "failed", detail=str(exc))
        state.add_run(tick, job_id)
        journal().append("tick_submitted", tick=shown, job=job_id, init_from=init_from,
                         replaced=list(action.cancel))
        detail = f"replaced {', '.join(action.cancel)}" if action.cancel else None
        if init_from:
            detail = ", ".join(filter(None, [detail, f"initialised from {init_from}"]))
        return Outcome(schedule.name, shown, "submitted", job_id, detail)


__all__ = ["MAX_SLEEP_S", "Outcome", "ScheduledJobs", "Scheduler"]
