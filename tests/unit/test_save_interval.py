"""``checkpoint.interval: auto``: Young's interval within its bounds, the job's observed time
between failures, and the runtime's schedule of saves (torch-free: the ranks' agreement is the
checkpointer's, tried in tests/integration/test_async_and_auto_interval.py)."""

from __future__ import annotations

import math

import pytest

from fsdp_orch.runtime.save_schedule import SaveSchedule
from fsdp_orch.vocab.save_interval import (
    AUTO_FIRST_SAVE_STEPS,
    AUTO_MAX_SECONDS,
    auto_interval,
    expected_loss_fraction,
    interval_in_steps,
    observed_mtbf,
    worth_changing,
    young_seconds,
)


def test_young_is_the_least_loss() -> None:
    cost, mtbf = 10.0, 4 * 3600.0
    best = young_seconds(cost, mtbf)
    assert best == pytest.approx(math.sqrt(2 * 10 * 14400))  # 536.7 s
    at = expected_loss_fraction(best, cost, mtbf)
    assert at < expected_loss_fraction(best * 0.8, cost, mtbf)
    assert at < expected_loss_fraction(best * 1.25, cost, mtbf)
    with pytest.raises(ValueError):
        young_seconds(1.0, 0.0)


def test_interval_in_steps_is_held_within_its_bounds_and_says_so() -> None:
    free = interval_in_steps(0.5, 400.0, 0.1, min_steps=1, max_steps=1000)
    assert free.steps == 200 and free.seconds == pytest.approx(20.0)  # sqrt(2*0.5*400) = 20 s
    assert "held" not in free.why
    low = interval_in_steps(0.5, 400.0, 0.1, min_steps=500, max_steps=1000)
    assert low.steps == 500 and low.why.endswith("held to at least 500")
    high = interval_in_steps(0.5, 400.0, 0.1, min_steps=1, max_steps=50)
    assert high.steps == 50 and high.why.endswith("held to at most 50")


@pytest.mark.parametrize(("first", "now", "failures", "expected"), [
    (1000.0, 1600.0, 2, 300.0),  # 10 minutes, two failures
    (1000.0, 1600.0, 0, None),  # attempt 0, or only planned restarts: nothing observed
    (None, 1600.0, 1, None),  # no attempt start known
    (1600.0, 1600.0, 1, None),  # no time has passed (a clock that went back)
])
def test_observed_mtbf_is_the_time_since_the_first_attempt_over_the_failures(
        first: float | None, now: float, failures: int, expected: float | None) -> None:
    assert observed_mtbf(first, now, failures) == expected


def test_auto_interval_says_where_the_time_between_failures_came_from() -> None:
    observed = auto_interval(0.02, 50.0, 0.05, observed=True)
    assert observed.steps == round(math.sqrt(2 * 0.02 * 50.0) / 0.05) == 28
    assert "(observed)" in observed.why
    assumed = auto_interval(0.02, 4 * 3600.0, 0.05, observed=False)
    assert "(assumed: checkpoint.auto_mtbf)" in assumed.why
    assert assumed.steps == round(math.sqrt(2 * 0.02 * 14400) / 0.05)  # 24 s: 480 steps


def test_auto_interval_is_at_least_a_step_and_at_most_an_hour() -> None:
    assert auto_interval(0.0, 60.0, 1.0, observed=True).steps == 1
    slow = auto_interval(600.0, 30 * 24 * 3600.0, 2.0, observed=True)  # ideal: 5.5 h
    assert slow.steps == int(AUTO_MAX_SECONDS // 2.0) and "held to at most" in slow.why
    assert auto_interval(600.0, 1e9, 7200.0, observed=True).steps == 1  # a step over an hour


@pytest.mark.parametrize(("current", "proposed", "changes"), [
    (None, 7, True), (100, 119, False), (100, 81, False), (100, 121, True), (100, 79, True),
    (1, 2, True),
])
def test_a_new_choice_replaces_the_one_in_force_beyond_a_fifth(
        current: int | None, proposed: int, changes: bool) -> None:
    assert worth_changing(current, proposed) is changes


def test_a_fixed_interval_saves_at_its_multiples() -> None:
    schedule = SaveSchedule(5)
    assert [s for s in range(0, 16) if schedule.due(s, None)] == [5, 10, 15]
    assert not schedule.due(10, 10)  # saved already (the supervisor asked at that step)
    assert not schedule.auto and schedule.choose(1.0, 1.0) is None
    with pytest.raises(ValueError):
        SaveSchedule(0)


def test_auto_saves_first_a_few_steps_in_then_at_its_choice() -> None:
    schedule = SaveSchedule("auto", mtbf_s=50.0, observed=True)
    assert schedule.steps == AUTO_FIRST_SAVE_STEPS
    assert [s for s in range(1, 12) if schedule.due(s, None)] == [10, 11]
    assert [s for s in range(41, 52) if schedule.due(s, 40)] == [50, 51]  # after a restore at 40
    chosen = schedule.choose(0.02, 0.05)
    assert chosen is not None and chosen.steps == schedule.steps == 28
    assert schedule.due(38, 10) and not schedule.due(37, 10)
    assert schedule.choose(0.021, 0.05) is None  # 29 steps: within a fifth, kept
    assert schedule.choose(0.08, 0.05) is not None and schedule.steps == 57


def test_nothing_is_chosen_before_a_step_time_is_known() -> None:
    schedule = SaveSchedule("auto")
    assert schedule.choose(0.5, 0.0) is None and schedule.steps == AUTO_FIRST_SAVE_STEPS


def test_step_times_leave_the_saves_out() -> None:
    schedule = SaveSchedule("auto")
    schedule.stepped(1, 100.0)  # the first step call: nothing to measure from
    schedule.rested(1, 100.0)
    schedule.stepped(2, 100.1)
    schedule.rested(2, 100.1)
    schedule.stepped(3, 100.2)
    schedule.saved(5.0)  # step 3 saved, blocking 5 s...
    schedule.rested(3, 105.2)
    schedule.stepped(4, 105.3)  # ...which is not a step time
    schedule.rested(4, 105.3)
    schedule.stepped(6, 109.0)  # a step not seen (5): no time measured across it
    cost, step_s = schedule.measured()
    assert cost == 5.0 and step_s == pytest.approx(0.1)
    assert len(schedule.step_times) == 3


def test_the_save_cost_is_the_median_of_the_last_three() -> None:
    schedule = SaveSchedule("auto")
    for seconds in (9.0, 0.2, 0.3, 0.25):  # the first one also allocated the staging buffers
        schedule.saved(seconds)
    assert schedule.measured()[0] == 0.25
