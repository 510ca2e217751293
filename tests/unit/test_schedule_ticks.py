"""Which ticks of a schedule run, are skipped or missed: the pure rules, at fixed times."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from fsdp_orch.jobspec.schedule import Schedule, check_schedule_name, first_fire, parse_schedule
from fsdp_orch.schedule.book import ScheduleBook
from fsdp_orch.schedule.decide import decide, tick_key
from fsdp_orch.schedule.ticks import local_iso, next_tick, plan_ticks, utc_iso
from fsdp_orch.vocab.errors import InputError


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() \
        if "+" not in text else datetime.fromisoformat(text).timestamp()


MINUTELY = "* * * * *"


def test_the_tick_just_reached_runs_and_nothing_else():
    plan = plan_ticks(MINUTELY, "UTC", after=at("2026-11-24T03:00:00"),
                      now=at("2026-11-24T03:01:00.5"), max_catch_up=1)
    assert plan.run == (at("2026-11-24T03:01:00"),)
    assert plan.missed == 0


def test_nothing_is_due_before_the_next_tick():
    plan = plan_ticks(MINUTELY, "UTC", after=at("2026-11-24T03:01:00"),
                      now=at("2026-11-24T03:01:59"), max_catch_up=1)
    assert plan.run == () and plan.missed == 0


def test_a_tick_exactly_now_is_due():
    plan = plan_ticks(MINUTELY, "UTC", after=at("2026-11-24T03:00:30"),
                      now=at("2026-11-24T03:01:00"), max_catch_up=1)
    assert plan.run == (at("2026-11-24T03:01:00"),)


def test_after_a_long_downtime_one_catch_up_runs_and_the_rest_are_missed():
    # down from 03:00 to 05:00:30: 120 ticks due; 05:00 is on time, 04:59 is the one catch-up
    plan = plan_ticks(MINUTELY, "UTC", after=at("2026-11-24T03:00:00"),
                      now=at("2026-11-24T05:00:30"), max_catch_up=1)
    assert plan.run == (at("2026-11-24T04:59:00"), at("2026-11-24T05:00:00"))
    assert plan.missed == 118
    assert (plan.missed_first, plan.missed_last) == (
        at("2026-11-24T03:01:00"), at("2026-11-24T04:58:00"))
    assert plan.last_handled == at("2026-11-24T05:00:00")


def test_a_nightly_schedule_down_for_days_runs_only_the_last_missed_night():
    plan = plan_ticks("0 3 * * *", "UTC", after=at("2026-11-20T03:00:00"),
                      now=at("2026-11-24T12:00:00"), max_catch_up=1)
    assert plan.run == (at("2026-11-24T03:00:00"),)  # nine hours late: a catch-up, not on time
    assert plan.missed == 3 and plan.missed_last == at("2026-11-23T03:00:00")


def test_no_catch_up_when_it_is_zero():
    plan = plan_ticks("0 3 * * *", "UTC", after=at("2026-11-20T03:00:00"),
                      now=at("2026-11-24T12:00:00"), max_catch_up=0)
    assert plan.run == () and plan.missed == 4 and plan.last_handled == at("2026-11-24T03:00:00")


def test_more_catch_up_when_configured():
    plan = plan_ticks("0 3 * * *", "UTC", after=at("2026-11-20T03:00:00"),
                      now=at("2026-11-24T12:00:00"), max_catch_up=3)
    assert plan.run == (
        at("2026-11-22T03:00:00"), at("2026-11-23T03:00:00"), at("2026-11-24T03:00:00"))
    assert plan.missed == 1


def test_the_hours_are_the_time_zones():
    # 03:00 in Paris is 02:00 UTC in winter and 01:00 UTC in summer
    winter = next_tick("0 3 * * *", "Europe/Paris", at("2026-11-24T00:00:00"))
    summer = next_tick("0 3 * * *", "Europe/Paris", at("2026-07-01T00:00:00"))
    assert utc_iso(winter) == "2026-11-24T02:00:00Z"
    assert utc_iso(summer) == "2026-07-01T01:00:00Z"
    assert local_iso(winter, "Europe/Paris") == "2026-11-24T03:00:00+01:00"


def test_the_idempotency_key_is_the_schedule_and_the_instant():
    assert tick_key("nightly", utc_iso(at("2026-11-24T03:00:00"))) == (
        "schedule:nightly@2026-11-24T03:00:00Z")


@pytest.mark.parametrize(("concurrency", "active", "submit", "cancel"), [
    ("forbid", [], True, ()),
    ("forbid", ["a"], False, ()),
    ("replace", ["a", "b"], True, ("a", "b")),
    ("replace", [], True, ()),
    ("allow", ["a"], True, ()),
])
def test_concurrency(concurrency, active, submit, cancel):
    action = decide(concurrency, active)
    assert (action.submit, action.cancel) == (submit, cancel)
    if not submit:
        assert "a" in (action.reason or "") and "forbid" in (action.reason or "")


NIGHTLY = {"name": "nightly", "cron": "0 3 * * *", "cluster": "local", "job_file": "/j.yaml"}


@pytest.mark.parametrize("cron", ["61 * * * *", "* * * *", "0 3 * * * *", "every day", ""])
def test_bad_cron_names_the_field(cron):
    with pytest.raises(InputError) as err:
        parse_schedule({**NIGHTLY, "cron": cron})
    assert err.value.field == "cron" and "five-field" in str(err.value)


def test_bad_time_zone_names_the_field_as_the_caller_spells_it():
    with pytest.raises(InputError) as err:
        parse_schedule({**NIGHTLY, "tz": "Europe/Pariss"}, labels={"tz": "--tz"})
    assert err.value.field == "--tz" and "IANA" in str(err.value)


@pytest.mark.parametrize(("field", "value", "words"), [
    ("name", "../up", "letters, digits"),
    ("concurrency", "queue", "expected one of forbid, replace, allow; got 'queue'"),
    ("max_catch_up", -1, "expected 0 (never run missed ticks) or more; got -1"),
])
def test_bad_values_name_the_field_and_the_value(field, value, words):
    with pytest.raises(InputError) as err:
        parse_schedule({**NIGHTLY, field: value})
    assert err.value.field == field and words in str(err.value)


def test_only_the_first_bad_field_is_reported():
    with pytest.raises(InputError) as err:
        parse_schedule({**NIGHTLY, "cron": "61 * * * *", "tz": "Nowhere"})
    assert err.value.field == "cron" and "Nowhere" not in str(err.value)


def test_an_unknown_key_is_refused_with_a_hint():
    with pytest.raises(InputError) as err:
        parse_schedule({**NIGHTLY, "max_catchup": 2})
    assert err.value.field == "max_catchup" and "did you mean 'max_catch_up'" in str(err.value)


def test_the_cron_is_stored_with_single_spaces_and_the_defaults_fill_in():
    schedule = parse_schedule({**NIGHTLY, "cron": " 0  3 * * * "})
    assert (schedule.cron, schedule.tz, schedule.concurrency, schedule.max_catch_up) == (
        "0 3 * * *", "UTC", "forbid", 1)


def test_a_schedule_round_trips_through_its_file():
    schedule = Schedule(name="n", cron="0 3 * * *", tz="UTC", cluster="local", job_file="/j.yaml",
                        overrides=("nodes=2",), concurrency="replace", init_from_previous=True,
                        created_at=1.0, active_since=2.0)
    assert Schedule.from_json(schedule.to_json()) == schedule


def test_a_file_written_before_the_model_still_reads():
    # the keys and layout the dataclass wrote; a key a newer version adds is ignored
    text = json.dumps({"accelerate_config": None, "active_since": 2.5, "cluster": "local",
                       "concurrency": "allow", "created_at": 2.5, "cron": "*/5 * * * *",
                       "init_from_previous": False, "job_file": "/j.yaml", "max_catch_up": 0,
                       "name": "n", "overrides": ["nodes=2"], "paused": True, "tz": "Europe/Paris"},
                      indent=2, sort_keys=True) + "\n"
    schedule = Schedule.from_json(text[:-2] + ',\n  "from_the_future": 1\n}\n')
    assert schedule.overrides == ("nodes=2",) and schedule.paused and schedule.max_catch_up == 0
    assert schedule.to_json() == text


@pytest.mark.parametrize("cron",
                         ["0 3 31 2 *", "0 3 30 2 *", "0 3 31 4,6,9,11 *", "*/5 * 30,31 2 *"])
def test_a_cron_that_never_fires_is_refused_by_its_next_tick(cron):
    """Valid fields, but no date matches: croniter's search for the next tick fails, and an `add`
    that let it in made every later `schedule list` and `scheduler run` crash."""
    with pytest.raises(InputError) as err:
        parse_schedule({**NIGHTLY, "cron": cron}, labels={"cron": "--cron"})
    assert (err.value.field == "--cron" and "never fires" in str(err.value)
            and repr(cron) in str(err.value))


@pytest.mark.parametrize("cron", ["0 3 29 2 *", "0 3 30 2 1", "0 3 31 * *", "59 23 31 12 *"])
def test_a_rare_cron_that_does_fire_is_kept(cron):
    """Feb 29 comes every four years; day-of-month OR day-of-week (Feb 30, or any Monday) fires."""
    assert parse_schedule({**NIGHTLY, "cron": cron}).cron == cron
    assert first_fire(cron, datetime(2026, 3, 1, tzinfo=timezone.utc)) is not None


@pytest.mark.parametrize("name",
                         ["", ".", "..", "../x", "a/b", "/abs", ".hidden", "-dash", "a b", "a\nb",
                          "a" * 65, "é"])
def test_a_schedule_name_is_one_safe_path_part(name):
    with pytest.raises(InputError) as err:
        check_schedule_name(name)
    assert err.value.field == "NAME" and "letters, digits" in str(err.value)


@pytest.mark.parametrize("name", ["nightly", "a", "A.b_c-d", "0", "a" * 64, "retrain.v2"])
def test_good_schedule_names(name):
    assert check_schedule_name(name) == name


@pytest.fixture
def book(tmp_path):
    warnings: list[str] = []
    schedules = ScheduleBook(tmp_path, warn=warnings.append)
    schedules.add(parse_schedule({**NIGHTLY, "name": "ok1"}))
    schedules.warnings = warnings  # type: ignore[attr-defined]
    return schedules


def plant(book, name, text, file="schedule.json"):
    folder = book.root / name
    folder.mkdir(exist_ok=True)
    (folder / file).write_text(text)
    return folder / file


@pytest.mark.parametrize("text", [
    json.dumps({**NIGHTLY, "name": "bad", "cron": "0 3 31 2 *"}),  # an older version let it in
    json.dumps({**NIGHTLY, "name": "bad", "cron": "every day"}),
    json.dumps({**NIGHTLY, "name": "../ok1"}),
    json.dumps({**NIGHTLY, "name": "other"}),  # not its folder's name
    "{not json", "[1, 2]", "",
])
def test_a_broken_schedule_is_skipped_with_one_warning_naming_its_file(book, text):
    path = plant(book, "bad", text)
    assert [s.name for s in book.all()] == ["ok1"]
    assert [s.name for s in book.all()] == ["ok1"]  # the scheduler's passes: warned once
    [warning] = book.warnings
    assert (warning.startswith("skipping schedule bad: ") and str(path) in warning
            and "\n" not in warning)
    book.remove("bad")  # what one wants done with it, and it works
    assert not (book.root / "bad").exists() and [s.name for s in book.all()] == ["ok1"]


@pytest.mark.parametrize("text",
                         ["{broken", "[]", '{"last_tick": "soon"}', '{"runs": [{"tick": 1}]}'])
def test_a_broken_state_file_skips_its_schedule_only(book, text):
    book.add(parse_schedule({**NIGHTLY, "name": "two"}))
    path = plant(book, "two", text, "state.json")
    assert [s.name for s in book.all()] == ["ok1"]
    [warning] = book.warnings
    assert str(path) in warning


def test_every_schedule_command_checks_the_name_before_any_path(book, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "schedule.json").write_text(json.dumps({**NIGHTLY, "name": "outside"}))
    for call in (lambda n: book.get(n), lambda n: book.remove(n), lambda n: book.events(n),
                 lambda n: book.state(n),
                 lambda n: book.save(parse_schedule({**NIGHTLY}).model_copy(
                     update={"name": n}))):
        with pytest.raises(InputError) as err:
            call("../outside")
        assert err.value.field == "NAME"
    assert ((outside / "schedule.json").exists()
            and sorted(p.name for p in outside.iterdir()) == ["schedule.json"])
