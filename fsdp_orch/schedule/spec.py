"""A schedule: which job, on which cluster, at which cron ticks in which time zone, and what to do
when a tick comes while the previous run is still going. Validated here; stored as JSON."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

from fsdp_orch.vocab.errors import InputError

CONCURRENCY = ("forbid", "replace", "allow")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Schedule:
    name: str
    cron: str
    tz: str  # an IANA zone (UTC, Europe/Paris): the cron's hours are this zone's
    cluster: str
    job_file: str  # absolute; read again at each tick, so edits to it apply to later runs
    overrides: tuple[str, ...] = ()  # --set lines
    concurrency: str = "forbid"
    init_from_previous: bool = False  # each run starts from the last successful run's weights
    max_catch_up: int = 1  # ticks missed while no scheduler ran: at most this many are run late
    paused: bool = False
    created_at: float = 0.0
    # Ticks at or before this time are never run: the schedule's creation, or its last resume.
    active_since: float = 0.0
    accelerate_config: str | None = None

    def to_json(self) -> str:
        data = asdict(self)
        data["overrides"] = list(self.overrides)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        data = json.loads(text)
        data["overrides"] = tuple(data.get("overrides") or ())
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InputError(f"expected a name of letters, digits, '.', '_' or '-' (at most 64); got {name!r}",
                         field="NAME")
    return name


def check_tz(tz: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(f"expected an IANA time zone such as UTC or Europe/Paris; got {tz!r}",
                         field="--tz") from None
    return tz


def check_cron(cron: str) -> str:
    from croniter import croniter

    fields = cron.split()
    if len(fields) != 5 or not croniter.is_valid(cron):
        raise InputError(f"expected a five-field cron expression (minute hour day-of-month month "
                         f"day-of-week), such as '0 3 * * *'; got {cron!r}", field="--cron")
    return " ".join(fields)


def check_concurrency(value: str) -> str:
    if value not in CONCURRENCY:
        raise InputError(f"expected one of {', '.join(CONCURRENCY)}; got {value!r}", field="--concurrency")
    return value


def check_catch_up(value: int) -> int:
    if value < 0:
        raise InputError(f"expected 0 (never run missed ticks) or more; got {value}", field="--max-catch-up")
    return value


__all__ = ["CONCURRENCY", "Schedule", "check_catch_up", "check_concurrency", "check_cron", "check_name",
           "check_tz"]
