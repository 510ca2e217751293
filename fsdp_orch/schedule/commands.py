"""What ``fsdp-orch schedule ...`` and ``fsdp-orch scheduler run`` do, for the CLI to print."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fsdp_orch.jobspec.schedule import Schedule
from fsdp_orch.schedule.book import ScheduleBook
from fsdp_orch.schedule.ticks import local_iso, next_tick

# Not in ``schedule list``: paused is shown as its state, the rest is bookkeeping.
_NOT_LISTED = {"paused", "created_at", "active_since", "accelerate_config"}


def book() -> ScheduleBook:
    from fsdp_orch.places.builtin import home

    return ScheduleBook(home())


def add_schedule(schedule: Schedule, now: float | None = None) -> Schedule:
    """Plans the job on its cluster now (everything a tick will need) before writing; stores the
    files as absolute paths and the time of creation."""
    from fsdp_orch.control.planning import plan_job

    plan_job(Path(schedule.job_file), schedule.cluster, overrides=list(schedule.overrides),
             accelerate_config=schedule.accelerate_config)
    now = time.time() if now is None else now
    accelerate = schedule.accelerate_config
    schedule = schedule.model_copy(update={
        "job_file": str(Path(schedule.job_file).resolve()),
        "accelerate_config": str(Path(accelerate).resolve()) if accelerate else None,
        "created_at": now, "active_since": now})
    book().add(schedule)
    return schedule


def set_paused(name: str, paused: bool, now: float | None = None) -> Schedule:
    """Resuming does not run the ticks that passed while paused."""
    schedules = book()
    schedule = schedules.get(name)
    if schedule.paused == paused:
        return schedule
    now = time.time() if now is None else now
    changes: dict[str, Any] = {"paused": paused}
    if not paused:
        changes["active_since"] = now
    schedule = schedule.model_copy(update=changes)
    schedules.save(schedule)
    schedules.writer(name, "cli").append("paused" if paused else "resumed")
    return schedule


def schedule_rows(now: float | None = None) -> list[dict[str, Any]]:
    now = time.time() if now is None else now
    schedules = book()
    rows = []
    for s in schedules.all():
        state = schedules.state(s.name)
        last = state.runs[-1] if state.runs else None
        rows.append({
            **s.model_dump(mode="json", exclude=_NOT_LISTED),
            "state": "paused" if s.paused else "active",
            "last_tick": local_iso(state.last_tick, s.tz) if state.last_tick else None,
            "last_job": last["job"] if last else None,
            "next_tick": None if s.paused else local_iso(
                next_tick(s.cron, s.tz, max(now, s.active_since, state.last_tick or 0)), s.tz),
        })
    return rows


__all__ = ["add_schedule", "book", "schedule_rows", "set_paused"]
