"""The hang window that follows the job: each rank's step-time summary and the pure estimator."""

from __future__ import annotations

import json

import pytest

from fsdp_orch.decide.hang_window import WARMUP_STEPS, Window, hang_window, moved
from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.nodeagent.summary import changed_beats, compact, parse_summary, summary_line
from fsdp_orch.observe.heartbeats import Heartbeat, parse_heartbeat
from fsdp_orch.observe.step_times import RECENT, StepTimes, percentile

DEFAULT = Watch()  # no watch: settings at all


def timed(durations: list[float], start: float = 100.0) -> StepTimes:
    times = StepTimes()
    at = start
    times.step_at(at)
    for duration in durations:
        at += duration
        times.step_at(at)
    return times


def beat(rank: int, step_s: dict | None,  # type: ignore[type-arg]
         state: str = "training") -> Heartbeat:
    return Heartbeat(rank=rank, attempt=0, step=50, loss=1.0, time=1000.0, state=state, pid=1,
                     step_s=step_s)


def test_the_default_is_adaptive_with_heartbeat_timeout_as_the_ceiling():
    assert DEFAULT.hang_detection == "adaptive"
    assert (DEFAULT.adaptive_multiplier, DEFAULT.adaptive_min, DEFAULT.heartbeat_timeout) == (
        10.0, 2.0, 300.0)


def test_a_rank_times_the_gaps_between_its_steps_and_sends_nothing_before_two_steps():
    times = StepTimes()
    assert times.summary() is None
    times.step_at(10.0)
    assert times.summary() is None  # one step: no duration yet
    times.step_at(10.25)
    assert times.summary() == {"n": 1, "p50": 0.25, "p95": 0.25, "max": 0.25}


def test_the_summary_is_over_the_recent_steps_and_counts_every_step():
    times = timed([5.0] * 10 + [0.1] * RECENT)  # a slow start, then RECENT fast steps push it out
    summary = times.summary()
    assert summary is not None
    assert (summary["n"] == 10 + RECENT and summary["p95"] == pytest.approx(0.1)
            and summary["max"] == pytest.approx(0.1))


def test_a_gap_that_held_a_checkpoint_save_is_not_a_step_time():
    times = StepTimes()
    at = 0.0
    for step in range(1, 41):  # 0.1 s steps, a 1.5 s save after every 10th (the bench's demo)
        at += 0.1
        times.step_at(at)
        if step % 10 == 0:
            times.saving()
            at += 1.5
    summary = times.summary()
    assert summary is not None and summary["max"] == pytest.approx(0.1), summary
    assert summary["n"] == 36  # the first step and the three after a save start a new gap


def test_a_rank_reporting_a_save_through_the_bootstrap_does_not_time_the_save(tmp_path):
    from fsdp_orch.bootstrap.agent import Agent
    now = [0.0]
    agent = Agent({"FSDP_ORCH_RUN_DIR": str(tmp_path)}, clock=lambda: now[0])
    agent.active, agent._step_times = True, StepTimes()
    agent._write_locked = lambda at: None  # type: ignore[method-assign]
    for at, step, state in [(1.0, 1, "training"), (1.1, 2, "training"), (1.2, 2, "saving"),
                            (3.0, 3, "training"), (3.1, 4, "training")]:
        now[0] = at
        agent.report(0, step, None, state, {})
    summary = agent._step_times.summary()
    assert (summary is not None and summary["n"] == 2
            and summary["max"] == pytest.approx(0.1)), summary


def test_the_95th_percentile_sees_a_slow_tail_but_not_a_one_off():
    one_off = timed([0.1] * 63 + [30.0]).summary()  # an evaluation pass between two steps
    assert (one_off is not None and one_off["p95"] == pytest.approx(0.1)
            and one_off["max"] == pytest.approx(30.0))
    tail = timed([0.1] * 56 + [0.4] * 8).summary()  # every 8th step logs and syncs
    assert (tail is not None and tail["p95"] == pytest.approx(0.4)
            and tail["p50"] == pytest.approx(0.1))
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0 and percentile([7.0], 0.95) == 7.0


def test_before_warm_up_the_window_is_the_ceiling():
    watch = Watch.model_validate({"heartbeat_timeout": "30s"})
    assert hang_window(watch, {}) == Window(30.0, "warm-up")
    few = {"n": WARMUP_STEPS - 1, "p50": 0.1, "p95": 0.1, "max": 0.1}
    assert hang_window(watch, {0: beat(0, few), 1: beat(1, few)}) == Window(30.0, "warm-up")
    enough = {**few, "n": WARMUP_STEPS}
    assert hang_window(watch, {0: beat(0, enough), 1: beat(1, few)}).mode == "adaptive"


def test_the_window_is_a_multiple_of_the_slowest_ranks_95th_percentile():
    watch = Watch.model_validate({"heartbeat_timeout": "5m"})
    beats = {0: beat(0, {"n": 40, "p50": 0.3, "p95": 0.5, "max": 2.0}),
             1: beat(1, {"n": 40, "p50": 0.3, "p95": 0.8, "max": 0.9})}
    assert hang_window(watch, beats) == Window(8.0, "adaptive", 0.8)


def test_the_window_is_clamped_to_the_floor_and_the_ceiling():
    watch = Watch.model_validate({"heartbeat_timeout": "30s"})
    fast = {0: beat(0, {"n": 300, "p50": 0.05, "p95": 0.07, "max": 0.2})}
    assert hang_window(watch, fast).seconds == 2.0  # 10 x 0.07 s = 0.7 s, below the floor
    slow = {0: beat(0, {"n": 300, "p50": 4.0, "p95": 6.0, "max": 7.0})}
    assert hang_window(watch, slow).seconds == 30.0  # 60 s, above heartbeat_timeout
    floor = Watch.model_validate({"heartbeat_timeout": "30s", "adaptive_min": "5s"})
    assert hang_window(floor, fast).seconds == 5.0
    tight = Watch.model_validate({"heartbeat_timeout": "1s"})  # a ceiling below the floor wins
    assert hang_window(tight, fast).seconds == 1.0


def test_fixed_is_always_heartbeat_timeout():
    watch = Watch.model_validate({"hang_detection": "fixed", "heartbeat_timeout": "30s"})
    assert (hang_window(watch, {0: beat(0, {"n": 300, "p50": 0.1, "p95": 0.1, "max": 0.1})})
            == Window(30.0, "fixed"))


def test_the_window_is_re_estimated_as_the_step_time_changes():
    watch = Watch.model_validate({"heartbeat_timeout": "5m"})
    times = timed([0.5] * 20)
    first = hang_window(watch, {0: beat(0, times.summary())})
    assert first.seconds == pytest.approx(5.0)
    for _ in range(RECENT):  # the job slows down 3x (a larger batch after a resize)
        times.step_at(times._last_at + 1.5)  # type: ignore[operator]
    later = hang_window(watch, {0: beat(0, times.summary())})
    assert later.seconds == pytest.approx(15.0) and moved(first, later)


def test_a_step_5x_slower_after_a_resume_starts_at_the_ceiling_then_follows_the_new_pace():
    watch = Watch.model_validate({"heartbeat_timeout": "30s"})
    before = hang_window(watch, {0: beat(0, timed([0.3] * 40).summary())})
    assert before.seconds == pytest.approx(3.0)
    # the new attempt's ranks time their own steps afresh
    resumed = timed([1.5] * (WARMUP_STEPS - 1))
    assert hang_window(watch, {0: beat(0, resumed.summary())}) == Window(30.0, "warm-up")
    resumed.step_at(resumed._last_at + 1.5)  # type: ignore[operator]
    after = hang_window(watch, {0: beat(0, resumed.summary())})
    assert after.seconds == pytest.approx(15.0) and after.seconds > 5 * 1.5


def test_heartbeats_without_a_summary_or_with_a_malformed_one_count_as_warming_up():
    watch = Watch.model_validate({"heartbeat_timeout": "30s"})
    old = parse_heartbeat(json.dumps({"rank": 0, "attempt": 0, "step": 9, "loss": None, "time": 5.0,
                                      "state": "training", "pid": 3}))  # an older version's file
    assert old.step_s is None and hang_window(watch, {0: old}) == Window(30.0, "warm-up")
    for bad in ({"n": "many", "p95": 0.1}, {"n": 50, "p95": None}, {"n": 50, "p95": float("nan")},
                {"n": 50, "p95": -1.0}, {"n": True, "p95": 0.1}, {}):
        assert hang_window(watch, {0: beat(0, bad)}).mode == "warm-up", bad
    # ranks of two versions
    mixed = {0: old, 1: beat(1, {"n": 50, "p50": 0.5, "p95": 0.5, "max": 0.5})}
    assert hang_window(watch, mixed).seconds == 5.0
    with pytest.raises(ValueError, match="step_s"):
        parse_heartbeat(json.dumps({"rank": 0, "attempt": 0, "step": 9, "loss": None, "time": 5.0,
                                    "state": "training", "pid": 3, "step_s": [1, 2]}))


def test_an_event_when_the_window_first_applies_changes_mode_or_moves_by_more_than_a_fifth():
    assert moved(None, Window(30.0, "warm-up"))
    assert moved(Window(30.0, "warm-up"), Window(30.0, "adaptive", 4.0))
    assert not moved(Window(2.0, "adaptive", 0.1), Window(2.4, "adaptive", 0.24))
    assert moved(Window(2.0, "adaptive", 0.1), Window(2.5, "adaptive", 0.25))


def test_the_summary_survives_the_heartbeat_file_and_the_node_agents_line():
    summary = timed([0.1234, 0.2, 0.3] * 4).summary()
    beat_ = Heartbeat(rank=3, attempt=1, step=12, loss=0.5, time=1000.0, state="training", pid=7,
                      progress_at=999.5, host="n1", step_s=summary)
    data = json.loads(beat_.to_json())
    assert parse_heartbeat(beat_.to_json()) == beat_
    line = compact(data, now=1000.2)
    # it crosses the wire every step
    assert line["step_s"] == summary and len(json.dumps(summary)) < 60
    sent = {3: line}
    assert changed_beats({3: compact(data, now=1000.6)}, sent) == []  # unchanged: not sent again
    parsed = parse_summary(json.loads(summary_line(0, "n1", 1000.0, [line], attempt=1)))
    assert parsed.beats[3].step_s == summary
