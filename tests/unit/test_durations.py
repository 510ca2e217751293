"""Durations as users write them, and the messages for those we refuse."""

from __future__ import annotations

import pytest

from fsdp_orch.jobspec.durations import format_duration, parse_duration
from fsdp_orch.jobspec.loading import load_job_text
from fsdp_orch.vocab.errors import InputError


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("10m", 600), ("1h", 3600), ("1h30m", 5400), ("2d", 172800), ("250ms", 0.25),
    ("1.5h", 5400), ("1h 30m", 5400), (" 10M ", 600), ("90", 90), ("0", 0), ("2.5", 2.5),
    (90, 90), (2.5, 2.5), (0, 0), ("1h1m1s", 3661),
])
def test_accepted(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [
    "5 minutes", "ten seconds", "1x", "-5s", "s", "1h-30m", "", "   ", "1e3", "inf", "nan",
    "9" * 400, -1, -0.5, True, False, None, [], {}, float("inf"), float("nan"), 10**400,
])
def test_refused(text: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_message_is_short_for_huge_input() -> None:
    with pytest.raises(ValueError) as info:
        parse_duration("9" * 400)
    assert len(str(info.value)) < 120


@pytest.mark.parametrize(("seconds", "text"), [
    (0.25, "250ms"), (1, "1s"), (90, "1m30s"), (600, "10m"), (3600, "1h"), (5400, "1h30m"),
])
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_in_a_job_spec() -> None:
    job = load_job_text("name: a\nscript: t.py\n"
                        "watch: {heartbeat_timeout: 1h30m, poll_interval: 250ms}\n"
                        "restart: {backoff: {initial: 90, max: 10m, jitter: 0}}\n")
    assert job.watch.heartbeat_timeout == 5400
    assert job.watch.poll_interval == 0.25
    assert (job.restart.backoff.initial, job.restart.backoff.max, job.restart.backoff.jitter) == (
        90, 600, 0)


@pytest.mark.parametrize(("field", "value", "fragment"), [
    ("watch.heartbeat_timeout", "5 minutes",
     "expected a duration like 90s, 10m or 1h; got '5 minutes'"),
    ("watch.heartbeat_timeout", "0s", "expected at least 1s"),  # issue 61: not below a poll
    ("watch.startup_timeout", ".inf", "finite duration"),
    ("restart.backoff.initial", "-3s", "expected a duration"),
])
def test_bad_duration_in_a_job_spec(field: str, value: str, fragment: str) -> None:
    section, _, key = field.rpartition(".")
    parts = section.split(".")
    text = "name: a\nscript: t.py\n" + "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(parts))
    text += f"{'  ' * len(parts)}{key}: {value}\n"
    with pytest.raises(InputError) as info:
        load_job_text(text)
    assert info.value.field == field
    assert fragment in str(info.value)
    assert info.value.line == text.count("\n")
