"""A schedule (``fsdp-orch schedule add``): which job, on which cluster, at which cron ticks in
which time zone, and what to do when a tick comes while the previous run is still going. Stored as
JSON (``schedule.json``); its keys are the fields below."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Literal, get_args

from pydantic import ValidationError, field_validator

from fsdp_orch.jobspec.validation import StrictModel, _describe
from fsdp_orch.vocab.errors import InputError

Concurrency = Literal["forbid", "replace", "allow"]
CONCURRENCY: tuple[str, ...] = get_args(Concurrency)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_FIELD = "NAME"  # how the CLI spells the schedule's name (its argument)


def _name_problem(value: object) -> str | None:
    """Why ``value`` cannot name a schedule (a folder under ``schedules/``), or None. The pattern
    keeps it one path part: no ``/``, no ``..``, no leading dot or dash."""
    if isinstance(value, str) and _NAME.fullmatch(value):
        return None
    return ("expected a name of letters, digits, '.', '_' or '-' that starts with a letter or "
            f"digit (at most 64); got {value!r}")


def check_schedule_name(value: object) -> str:
    """``value`` if it can name a schedule; else InputError on NAME. Every schedule command checks
    its NAME with this before it touches a path, so none reaches outside ``schedules/``."""
    problem = _name_problem(value)
    if problem is not None:
        raise InputError(problem, field=NAME_FIELD)
    return str(value)


# Where a cron's check starts. A cron has no year, so whether it ever fires depends neither on when
# it is asked nor on the zone: a fixed time keeps the check pure (and Feb 29 comes in 2024).
_CHECKED_FROM = datetime(2024, 1, 1, tzinfo=timezone.utc)


def first_fire(cron: str, after: datetime = _CHECKED_FROM) -> datetime | None:
    """The cron's first tick after ``after``; None when it never comes (Feb 30: croniter gives up
    after searching its years)."""
    from croniter import croniter

    try:
        return croniter(cron, after).get_next(datetime)
    except (ValueError, KeyError, OverflowError):  # CroniterBadDateError is a ValueError
        return None


class Schedule(StrictModel):
    # In the order a bad value is reported (the first one only), and ``schedule list`` shows them.
    name: str  # a folder under $FSDP_ORCH_HOME/schedules
    cron: str  # five fields, stored with single spaces
    tz: str = "UTC"  # an IANA zone (UTC, Europe/Paris): the cron's hours are this zone's
    cluster: str
    # absolute once added; read again at each tick, so edits to it apply to later runs
    job_file: str
    # A tick while the previous run is active: skip it (forbid),
    # cancel that run (replace), run both (allow).
    concurrency: Concurrency = "forbid"
    init_from_previous: bool = False  # each run starts from the last successful run's weights
    max_catch_up: int = 1  # ticks missed while no scheduler ran: at most this many are run late
    overrides: tuple[str, ...] = ()  # --set lines
    accelerate_config: str | None = None
    paused: bool = False
    created_at: float = 0.0
    # Ticks at or before this time are never run: the schedule's creation, or its last resume.
    active_since: float = 0.0

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = _name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from croniter import croniter

        fields = value.split()
        if len(fields) != 5 or not croniter.is_valid(value):
            raise ValueError("expected a five-field cron expression (minute hour day-of-month "
                             f"month day-of-week), such as '0 3 * * *'; got {value!r}")
        if first_fire(value) is None:  # valid fields, but a date that never comes ('0 3 31 2 *')
            raise ValueError("it never fires (no date matches its day-of-month and month); "
                             "expected a cron with a next tick, such as '0 3 28 2 *'; "
                             f"got {value!r}")
        return " ".join(fields)

    @field_validator("tz")
    @classmethod
    def _tz(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("expected an IANA time zone such as UTC or Europe/Paris; "
                             f"got {value!r}") from None
        return value

    @field_validator("concurrency", mode="before")
    @classmethod
    def _concurrency(cls, value: object) -> object:
        if value not in CONCURRENCY:  # said the way the flag's help says it, not pydantic's way
            raise ValueError(f"expected one of {', '.join(CONCURRENCY)}; got {value!r}")
        return value

    @field_validator("max_catch_up")
    @classmethod
    def _max_catch_up(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"expected 0 (never run missed ticks) or more; got {value}")
        return value

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, file: str | None = None) -> Schedule:
        """Keys this version does not know are ignored (a file a newer fsdp-orch wrote). A file that
        is not a JSON object is an InputError naming it."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InputError(f"not valid JSON ({exc}); expected a schedule written by fsdp-orch",
                             file=file) from None
        if not isinstance(data, dict):
            raise InputError("expected a JSON object (a schedule written by fsdp-orch)", file=file)
        if data.get("overrides") is None:
            data.pop("overrides", None)
        return parse_schedule({k: v for k, v in data.items() if k in cls.model_fields}, file=file)


def parse_schedule(data: Mapping[str, Any], *, labels: Mapping[str, str] | None = None,
                   file: str | None = None) -> Schedule:
    """The schedule ``data`` describes, or one InputError for its first bad field, named as
    ``labels`` spell it (the CLI: its flags) or else as the model does."""
    try:
        return Schedule.model_validate(dict(data))
    except ValidationError as exc:
        path, message = _describe(exc.errors(include_url=False)[0], Schedule, dict(data))
        field = path.split(".")[0]
        raise InputError(message, file=file,
                         field=(labels or {}).get(field, path) or None) from None


__all__ = ["CONCURRENCY", "NAME_FIELD", "Concurrency", "Schedule", "check_schedule_name",
           "first_fire", "parse_schedule"]
