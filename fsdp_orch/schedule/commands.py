"""What ``fsdp-orch schedule ...`` and ``fsdp-orch scheduler run`` do, for the CLI to print."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from fsdp_orch.schedule.book import ScheduleBook
from fsdp_orch.schedule.spec import (
    Schedule,
    check_catch_up,
    check_concurrency,
    check_cron,
    check_name,
    check_tz,
)
from fsdp_orch.schedule.ticks import local_iso, next_tick


def book() -> ScheduleBook:
    from fsdp_orch.places.builtin import home

    return ScheduleBook(home())


def add_schedule(name: str, *, cron: str, tz: str, cluster: str, job_file: str, overrides: list[str],
                 concurrency: str, init_from_previous: bool, max_catch_up: int,
                 accelerate_config: str | None, now: float | None = None) -> Schedule:
    """Validates everything a tick will need (the job plans on the cluster now) before writing."""
    from fsdp_orch.control.job_control import plan_job

    check_name(name)
    cron = check_cron(cron)
    check_tz(tz)
    check_concurrency(concurrency)
    check_catch_up(max_catch_up)
    path = Path(job_file)
    plan_job(path, cluster, overrides=overrides, accelerate_config=accelerate_config)
    now = time.time() if now is None else now
    schedule = Schedule(name=name, cron=cron, tz=tz, cluster=cluster, job_file=str(path.resolve()),
                        overrides=tuple(overrides), concurrency=concurrency,
                        init_from_previous=init_from_previous, max_catch_up=max_catch_up,
                        created_at=now, active_since=now,
                        accelerate_config=str(Path(accelerate_config).resolve()) if accelerate_config else None)
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
    schedule = dataclasses.replace(schedule, **changes)
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
            "name": s.name, "cron": s.cron, "tz": s.tz, "cluster": s.cluster, "job_file": s.job_file,
            "concurrency": s.concurrency, "init_from_previous": s.init_from_previous,
            "max_catch_up": s.max_catch_up, "overrides": list(s.overrides),
            "state": "paused" if s.paused else "active",
            "last_tick": local_iso(state.last_tick, s.tz) if state.last_tick else None,
            "last_job": last["job"] if last else None,
            "next_tick": None if s.paused else local_iso(next_tick(s.cron, s.tz, max(now, s.active_since,
                                                                                   state.last_tick or 0)), s.tz),
        })
    return rows


__all__ = ["add_schedule", "book", "schedule_rows", "set_paused"]
