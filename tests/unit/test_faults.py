"""FSDP_ORCH_FAULT: the parser (pure) and the injector's decisions (sleep/exit recorded, not
done)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsdp_orch.bootstrap.faults import KINDS, Fault, FaultInjector, parse_faults


def test_parse_one_fault_with_defaults():
    assert parse_faults("hang:step=5:rank=1") == [Fault("hang", step=5, rank=1, attempt=0)]


def test_parse_several_with_attempt_and_seconds():
    text = "slow:step=2:rank=0:seconds=0.5; crash:step=9:rank=1:attempt=2;"
    assert parse_faults(text) == [Fault("slow", 2, 0, 0, 0.5), Fault("crash", 9, 1, 2)]


@pytest.mark.parametrize("text", ["", "   ", None])
def test_empty_means_no_faults(text):
    assert parse_faults(text) == []


@pytest.mark.parametrize("text, message", [
    ("explode:step=1:rank=0", "unknown kind 'explode'"),
    ("hang:rank=0", "step=N or after=S is required"),
    ("hang:step=1:after=2:rank=0", "step= and after= exclude each other"),
    ("hang:after=soon:rank=0", "after: expected a number, got 'soon'"),
    ("hang:after=-1:rank=0", "after: expected a number >= 0"),
    ("hang:after=inf:rank=0", "after: expected a number >= 0"),
    ("hang:after=nan:rank=0", "after: expected a number >= 0"),
    ("crash:after=5", "rank=N is required"),
    ("kill:after=5:rank=0:seconds=1", "seconds= applies only to 'slow'"),
    ("hang:step=1", "rank=N is required"),
    ("hang:step=one:rank=0", "step: expected an integer"),
    ("hang:step=-1:rank=0", "step: expected >= 0"),
    ("hang:step=1:rank=0:rank=1", "rank given twice"),
    ("hang:step=1:rank=0:when=now", "unknown key 'when'"),
    ("hang:step=1:rank", "expected key=value"),
    ("hang:step=1:rank=", "expected key=value"),
    ("crash:step=1:rank=0:seconds=3", "seconds= applies only to 'slow'"),
    ("slow:step=1:rank=0", "needs seconds=S"),
    ("slow:step=1:rank=0:seconds=0", "positive number"),
    ("slow:step=1:rank=0:seconds=fast", "seconds: expected a number"),
    ("hang:step=1:rank=0;;crash", "fault 'crash': step=N or after=S is required"),
])
def test_bad_specs_raise_a_clear_value_error(text, message):
    with pytest.raises(ValueError, match=message):
        parse_faults(text)


faults = st.builds(
    lambda kind, step, after, rank, attempt: Fault(
        kind, None if after is not None else step, rank, attempt,
        0.25 if kind == "slow" else None, after),
    kind=st.sampled_from(KINDS),
    step=st.integers(0, 10**6),
    after=st.none() | st.floats(0, 10**5, allow_nan=False, allow_infinity=False),
    rank=st.integers(0, 4096),
    attempt=st.integers(0, 100),
)


def _format(f: Fault) -> str:
    when = f"step={f.step}" if f.step is not None else f"after={f.after!r}"
    text = f"{f.kind}:{when}:rank={f.rank}:attempt={f.attempt}"
    return text + (f":seconds={f.seconds}" if f.seconds is not None else "")


@given(st.lists(faults, min_size=1, max_size=5))
def test_formatted_faults_parse_back(items):
    assert parse_faults(";".join(_format(f) for f in items)) == items


class Recorder:
    def __init__(self, stop_after: int | None = None):
        self.sleeps: list[float] = []
        self.exits: list[int] = []
        self.stop_after = stop_after

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.stop_after is not None and len(self.sleeps) >= self.stop_after:
            raise TimeoutError("stopped the test's endless sleep")

    def exit(self, code: int) -> None:
        self.exits.append(code)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def injector(text: str, rank: int = 0, attempt: int = 0, rec: Recorder | None = None,
             clock: Clock | None = None) -> FaultInjector:
    rec = rec or Recorder()
    return FaultInjector(parse_faults(text), rank, attempt, collective_timeout=5.0,
                         sleep=rec.sleep, exit=rec.exit, clock=clock or Clock())


def test_faults_apply_only_to_their_rank_and_attempt():
    assert not injector("crash:step=1:rank=1", rank=0)
    assert not injector("crash:step=1:rank=0:attempt=1", rank=0, attempt=0)
    assert injector("crash:step=1:rank=0:attempt=1", rank=0, attempt=1)
    injector("crash:step=1:rank=1", rank=0).at_step_end(1)  # nothing happens


def test_crash_exits_with_code_1_at_its_step_only():
    rec = Recorder()
    inj = injector("crash:step=3:rank=0", rec=rec)
    inj.at_step_end(2)
    assert rec.exits == []
    inj.at_step_end(3)
    assert rec.exits == [1]


def test_slow_sleeps_every_step_from_its_step_on():
    rec = Recorder()
    inj = injector("slow:step=3:rank=0:seconds=0.5", rec=rec)
    for step in range(1, 6):
        inj.at_step_end(step)
    assert rec.sleeps == [0.5, 0.5, 0.5]


def test_hang_sleeps_forever():
    rec = Recorder(stop_after=20)
    inj = injector("hang:step=2:rank=0", rec=rec)
    inj.at_step_end(1)
    assert rec.sleeps == []
    with pytest.raises(TimeoutError):
        inj.at_step_end(2)
    assert len(rec.sleeps) == 20 and rec.exits == []


def test_collective_timeout_outlasts_the_group_timeout_then_exits():
    rec = Recorder()
    injector("collective_timeout:step=4:rank=0", rec=rec).at_step_end(4)
    assert rec.sleeps == [15.0]  # collective_timeout (5s) + 10s grace
    assert rec.exits == [1]


def test_checkpoint_crash_fires_on_the_first_save_at_or_after_its_step():
    rec = Recorder()
    inj = injector("checkpoint_crash:step=5:rank=0", rec=rec)
    assert not inj.checkpoint_crash_due(4)
    assert inj.checkpoint_crash_due(6)
    inj.crash_in_checkpoint(6, ["__0_0.distcp"])
    assert rec.exits == [1]
    assert not inj.checkpoint_crash_due(8)


def test_parse_a_time_based_fault():
    assert parse_faults("crash:after=20.5:rank=1:attempt=3") == [
        Fault("crash", step=None, rank=1, attempt=3, after=20.5)]
    assert parse_faults("slow:after=0:rank=0:seconds=0.1") == [
        Fault("slow", None, 0, 0, 0.1, after=0.0)]


def steps(inj: FaultInjector, clock: Clock, first: int, last: int, every: float) -> None:
    """Steps first..last, each ``every`` seconds after the one before."""
    for step in range(first, last + 1):
        inj.at_step_end(step)
        clock.now += every


def test_after_counts_from_the_end_of_the_attempts_first_step_not_from_its_start():
    rec, clock = Recorder(), Clock()
    inj = injector("crash:after=10:rank=0:attempt=2", attempt=2, rec=rec, clock=clock)
    clock.now += 500.0  # start-up: not counted
    steps(inj, clock, 101, 110, 1.0)  # the attempt resumed at step 100; 9 s after its first step
    assert rec.exits == []
    inj.at_step_end(111)  # 10 s after step 101 ended
    assert rec.exits == [1]


def test_a_time_based_fault_fires_once_at_the_first_step_end_past_its_time():
    rec, clock = Recorder(), Clock()
    inj = injector("crash:after=2.5:rank=0", rec=rec, clock=clock)
    steps(inj, clock, 1, 10, 1.0)
    assert rec.exits == [1]  # at step 4 (3 s), not again at the steps after


def test_time_based_hang_and_collective_timeout():
    rec, clock = Recorder(stop_after=3), Clock()
    inj = injector("hang:after=1:rank=0", rec=rec, clock=clock)
    inj.at_step_end(1)
    clock.now += 1.0
    with pytest.raises(TimeoutError):
        inj.at_step_end(2)
    assert rec.sleeps == [3600, 3600, 3600]
    rec, clock = Recorder(), Clock()
    inj = injector("collective_timeout:after=0:rank=0", rec=rec, clock=clock)
    inj.at_step_end(7)
    assert (rec.sleeps, rec.exits) == ([15.0], [1])


def test_time_based_slow_sleeps_every_step_from_its_time_on():
    rec, clock = Recorder(), Clock()
    inj = injector("slow:after=2:rank=0:seconds=0.5", rec=rec, clock=clock)
    steps(inj, clock, 1, 5, 1.0)  # elapsed 0, 1, 2, 3, 4
    assert rec.sleeps == [0.5, 0.5, 0.5]


def test_time_based_checkpoint_crash_is_the_first_save_past_its_time():
    rec, clock = Recorder(), Clock()
    inj = injector("checkpoint_crash:after=5:rank=0", rec=rec, clock=clock)
    assert not inj.checkpoint_crash_due(0)  # before the first step: never due
    steps(inj, clock, 1, 4, 1.0)
    assert not inj.checkpoint_crash_due(4)  # 4 s
    clock.now += 1.0
    assert inj.checkpoint_crash_due(5)
    inj.crash_in_checkpoint(5, ["__0_0.distcp"])
    assert rec.exits == [1] and not inj.checkpoint_crash_due(10)


def test_time_based_faults_apply_only_to_their_rank_and_attempt():
    assert not injector("kill:after=1:rank=0:attempt=1", rank=0, attempt=0)
    assert not injector("kill:after=1:rank=1", rank=0)
    assert injector("kill:after=1:rank=0:attempt=1", rank=0, attempt=1)
