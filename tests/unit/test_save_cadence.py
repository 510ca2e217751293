"""The save cadence's cost and Young's interval at the failure rate seen, from event logs built as a
supervisor writes them (progress one per 5 s at most, each checkpoint recorded a poll after its
save), folded as status folds them."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fsdp_orch.cli.status_table import detail_lines
from fsdp_orch.record import event_types
from fsdp_orch.record.event_types import SAVE_CADENCE
from fsdp_orch.record.fold import fold
from fsdp_orch.record.save_cadence import (
    FLOOR,
    RATIO,
    SaveFacts,
    note_checkpoint,
    note_progress,
    notice_message,
    tell,
)
from fsdp_orch.record.status import JobStatus
from fsdp_orch.report.page import render
from fsdp_orch.vocab.save_interval import expected_loss_fraction, young_seconds

T0 = 1_700_000_000.0


@dataclass
class Run:
    """A job simulated step by step, as its supervisor records it."""

    step_s: float  # seconds a step takes
    every: int  # the script saves after every this many steps
    cost: float  # seconds each save holds training up
    runtime: bool = False  # the runtime reports its blocked seconds in rank 0's progress
    jitter: float = 0.0  # each step takes step_s times 1 +- this (uniform)
    seed: int = 0
    events: list[event_types.Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.t = T0 + 2.0
        self.attempt = -1
        self.saved = 0  # the latest complete checkpoint's step
        self.events.append(event_types.Submitted(at=T0, job="j", name="cadence",
                                                 cluster="local", run_dir="/r"))

    def attempt_for(self, steps: int, fail: str | None = None) -> None:
        """An attempt from the latest checkpoint for ``steps`` steps; ``fail``: the failure's
        category that ends it (None: it ends as the training does)."""
        self.attempt += 1
        a, step, blocked = self.attempt, self.saved, 0.0
        self.events.append(event_types.AttemptStarted(
            at=self.t, attempt=a, resume_from=f"/ck/{step}" if step else None,
            resume_step=step or None))
        self.t += 5.0  # startup
        self.events.append(event_types.FirstStep(at=self.t, attempt=a, first_step_at=self.t))
        last_progress = -math.inf
        for _ in range(steps):
            self.t += self.step_s * (1 + self.rng.uniform(-self.jitter, self.jitter))
            step += 1
            reached = self.t
            if step % self.every == 0:
                self.t += self.cost
                blocked += self.cost
                self.saved = step
                self.events.append(event_types.CheckpointCommitted(
                    at=self.t + 0.4, step=step, path=f"/ck/{step}"))
            if reached - last_progress >= 5.0:  # PROGRESS_EVERY_S
                last_progress = reached
                self.events.append(event_types.Progress(
                    at=self.t + 0.2, step=step, loss=1.0, progress_at=reached,
                    checkpoint_s=blocked if self.runtime else None))
        self.t += 1.0
        if fail is not None:
            self.events.append(event_types.FailureDetected(at=self.t, attempt=a, category=fail,
                                                           action="restart"))
            self.t += 1.0
        self.events.append(event_types.AttemptEnded(at=self.t, attempt=a,
                                                    exit_code=1 if fail else 0))
        if fail is not None:
            self.events.append(event_types.RestartScheduled(at=self.t, delay=2.0))
            self.t += 2.0

    def status(self, end: bool = True) -> JobStatus:
        events = [*self.events]
        if end:
            events.append(event_types.Finished(at=self.t + 1, state="SUCCEEDED"))
        status = fold(sorted(events, key=lambda e: e.at), "j")
        assert status is not None
        return status

    def cadence(self, end: bool = True) -> dict[str, Any]:
        doc = self.status(end).to_json()["save_cadence"]
        assert doc is not None
        return doc


def test_without_a_checkpoint_there_is_no_cadence() -> None:
    run = Run(step_s=0.5, every=1000, cost=3.0)
    run.attempt_for(100)
    assert run.status().to_json()["save_cadence"] is None


def test_no_failure_yet_gives_the_cost_and_the_cadence_but_no_advice() -> None:
    run = Run(step_s=0.5, every=50, cost=4.0)
    run.attempt_for(400)
    c = run.cadence()
    assert c["checkpoints"] == 8 and c["interval_steps"] == 50
    assert c["interval_s"] == pytest.approx(50 * 0.5 + 4.0, abs=0.01)
    assert c["step_s"] == pytest.approx(0.5)
    assert c["save_cost_source"] == "step_gaps" and c["save_cost_s"] == pytest.approx(4.0)
    assert c["failures"] == 0 and c["mtbf_s"] is None and c["mtbf_observed"] is False
    assert c["exposure_s"] > 0
    assert c["training_s_between_saves"] == pytest.approx(25.0)
    assert c["best_interval_s"] is None and c["verdict"] is None
    assert c["lost_pct_now"] is None and c["lost_s_per_hour_best"] is None
    assert notice_message(c) is None
    line = next(x for x in detail_lines(run.status(), now=run.t) if x.startswith("save cadence"))
    assert line.startswith("save cadence: every 50 steps (29s), a save holds training 4s "
                           "(estimated from the step gaps, +-0s); no failure in ")
    assert line.endswith("of attempts: no advice yet")


def failing(step_s: float, every: int, cost: float, *, attempts: int, steps: int,
            **kw: Any) -> Run:
    """``attempts`` attempts of ``steps`` steps, each but the last ended by a hang."""
    run = Run(step_s=step_s, every=every, cost=cost, **kw)
    for n in range(attempts):
        run.attempt_for(steps, fail="hang" if n < attempts - 1 else None)
    return run


def check_young(c: dict[str, Any]) -> None:
    """The advice is Young's interval at the cost and failure rate given, in steps and seconds,
    and the losses expected_loss_fraction's."""
    mtbf = c["exposure_s"] / c["failures"]
    assert c["mtbf_s"] == pytest.approx(mtbf, abs=1e-3)
    ideal = young_seconds(c["save_cost_s"], mtbf)
    assert c["best_interval_steps"] == max(1, round(ideal / c["step_s"]))
    assert c["best_interval_s"] == pytest.approx(c["best_interval_steps"] * c["step_s"], rel=1e-3)
    now = c["training_s_between_saves"]
    lost_now = expected_loss_fraction(now, c["save_cost_s"], mtbf)
    lost_best = expected_loss_fraction(c["best_interval_s"], c["save_cost_s"], mtbf)
    assert c["lost_pct_now"] == pytest.approx(100 * min(1, lost_now), abs=0.01)
    assert c["lost_pct_best"] == pytest.approx(100 * lost_best, abs=0.01)
    assert c["lost_s_per_hour_now"] == pytest.approx(3600 * min(1, lost_now), abs=0.1)
    assert c["lost_pct_best"] <= c["lost_pct_now"] + 1e-9


def test_too_sparse_saves_lose_the_work_done_since_the_last_one() -> None:
    # 0.5 s steps, 2 s saves every 500 steps (250 s), a hang every ~360 s of attempt:
    # Young says sqrt(2 x 2 x 360) ~ 38 s, about 76 steps
    run = failing(0.5, 500, 2.0, attempts=4, steps=700)
    c = run.cadence()
    assert c["failures"] == 3 and c["mtbf_observed"]
    assert c["save_cost_s"] == pytest.approx(2.0)
    check_young(c)
    assert 40 <= c["best_interval_steps"] <= 90
    assert c["verdict"] == "too_sparse"
    assert c["lost_pct_now"] > RATIO * c["lost_pct_best"]
    message = notice_message(c)
    assert message is not None and message.startswith("saving every 500 steps")
    assert "is too sparse" in message and f"every {c['best_interval_steps']} steps" in message


def test_too_dense_saves_lose_the_time_they_take() -> None:
    # 10 s saves every 40 steps of 0.5 s (20 s), a failure about every 15 minutes: best ~ 134 s
    run = failing(0.5, 40, 10.0, attempts=3, steps=1200)
    c = run.cadence()
    assert c["interval_steps"] == 40 and c["save_cost_s"] == pytest.approx(10.0, rel=0.05)
    check_young(c)
    assert c["best_interval_steps"] > 200
    assert c["verdict"] == "too_dense" and c["lost_pct_now"] > 40
    assert "too dense" in (notice_message(c) or "")


def test_saves_closer_than_the_progress_events_cannot_be_timed_from_them() -> None:
    # every progress gap (5 s at least) holds one save of 10 steps: the step time and the save's
    # cost cannot be told apart, and are not guessed
    run = failing(0.5, 10, 10.0, attempts=3, steps=300)
    c = run.cadence()
    assert c["interval_steps"] == 10 and c["save_cost_s"] is None and c["failures"] == 2
    assert c["step_s"] is None and c["best_interval_s"] is None
    assert c["verdict"] is None and notice_message(c) is None
    line = next(x for x in detail_lines(run.status(), now=run.t) if x.startswith("save cadence"))
    assert "a save's cost is not known yet" in line


def test_about_right_is_within_ratio_of_the_best() -> None:
    # 2 s saves, a failure about every 12 minutes: best ~ sqrt(2 x 2 x 720) ~ 54 s ~ 107 steps
    run = failing(0.5, 100, 2.0, attempts=3, steps=1400)
    c = run.cadence()
    check_young(c)
    assert c["verdict"] == "about_right"
    assert c["lost_pct_now"] <= RATIO * c["lost_pct_best"] or (
        c["lost_pct_now"] - c["lost_pct_best"] <= 100 * FLOOR)
    assert notice_message(c) is None
    line = next(x for x in detail_lines(run.status(), now=run.t) if x.startswith("save cadence"))
    assert "2 failure(s) in " in line and ": about right, best every " in line


def test_the_runtime_measures_its_saves() -> None:
    run = failing(0.2, 25, 1.5, attempts=2, steps=140, runtime=True, jitter=0.3, seed=3)
    c = run.cadence()
    assert c["save_cost_source"] == "measured" and c["save_cost_error_s"] is None
    assert c["save_cost_s"] == pytest.approx(1.5)
    assert c["saves_timed"] == c["checkpoints"] == 10  # 5 each: 25..125, 125+25..250
    check_young(c)


def test_an_unchanged_scripts_save_is_estimated_from_the_step_gap_that_holds_it() -> None:
    # steps 0.3 s +-30%: the estimate's error is that of the gap's steps at the typical time
    run = failing(0.3, 40, 2.5, attempts=2, steps=400, jitter=0.3, seed=1)
    c = run.cadence()
    assert c["save_cost_source"] == "step_gaps"
    assert c["saves_timed"] >= 15
    assert c["save_cost_s"] == pytest.approx(2.5, abs=0.3)
    assert c["save_cost_error_s"] is not None and c["save_cost_error_s"] < 0.2
    assert c["step_s"] == pytest.approx(0.3, rel=0.05)
    check_young(c)


def test_a_save_within_the_steps_noise_gives_no_advice() -> None:
    # 0.05 s saves among steps of 0.3 s +-50%: the estimate is about 0 give or take its error,
    # and Young's interval at 0 would be "save at every step"
    run = failing(0.3, 40, 0.05, attempts=3, steps=400, jitter=0.5, seed=2)
    c = run.cadence()
    assert c["save_cost_source"] == "step_gaps" and c["save_cost_error_s"] is not None
    assert c["save_cost_s"] <= 2 * c["save_cost_error_s"], c
    assert c["mtbf_observed"] and c["verdict"] is None and c["best_interval_s"] is None
    line = next(x for x in detail_lines(run.status(), now=run.t) if x.startswith("save cadence"))
    assert line.endswith("no advice while the save's cost is within its noise (fewer than 3 saves "
                         "timed, or under twice its error)"), line


def test_failures_a_save_cannot_help_with_are_not_counted() -> None:
    run = Run(step_s=0.5, every=50, cost=2.0)
    run.attempt_for(120, fail="straggler_replaced")
    run.attempt_for(120, fail="user_code_error")
    c = run.cadence()
    assert c["failures"] == 0 and c["mtbf_observed"] is False


def test_a_running_job_counts_its_attempt_to_its_latest_event() -> None:
    run = failing(0.5, 50, 2.0, attempts=2, steps=300)
    c = run.cadence(end=False)
    status = run.status(end=False)
    exposure = sum(((r.ended_at or status.last_event_at) - r.started_at)
                   for r in status.attempt_records.values())
    assert not status.ended and c["exposure_s"] == pytest.approx(exposure, abs=1e-3)


def test_a_checkpoint_recorded_again_is_one_checkpoint() -> None:
    facts = SaveFacts()
    for at, step in ((10.0, 1), (15.0, 20), (20.0, 40)):
        note_progress(facts, 0, step, at)
    note_checkpoint(facts, 0, 50, 30.0)
    note_checkpoint(facts, 0, 50, 31.0)  # a supervisor that re-attached
    note_checkpoint(facts, 0, None, 60.0)  # a checkpoint.file of unknown step
    assert facts.checkpoints == 2 and facts.interval_steps == [] and facts.interval_s == [30.0]
    assert facts.pending == [50]


def test_the_index_record_folds_on_to_the_same_status() -> None:
    """The index keeps a status and folds the new events onto it: the facts survive JSON."""
    run = failing(0.5, 50, 2.0, attempts=3, steps=200, jitter=0.2)
    events = sorted(run.events, key=lambda e: e.at)
    half = fold(events[:len(events) // 2], "j")
    assert half is not None
    kept = JobStatus.from_record(json.loads(json.dumps(half.to_record())))
    assert kept.save_facts == half.save_facts
    resumed = fold(events[len(events) // 2:], "j", kept)
    whole = fold(events, "j")
    assert resumed is not None and whole is not None
    assert resumed.to_json() == whole.to_json()
    assert resumed.to_json()["save_cadence"]["checkpoints"] > 0


def test_the_live_step_is_no_sample() -> None:
    from fsdp_orch.record.fold import fold_progress

    run = failing(0.5, 50, 2.0, attempts=1, steps=100)
    status = run.status(end=False)
    before = json.dumps(status.to_record()["save_facts"])
    fold_progress(status, event_types.Progress(at=run.t, step=101, progress_at=run.t))
    assert json.dumps(status.to_record()["save_facts"]) == before


class Journal:
    def __init__(self) -> None:
        self.notices: list[dict[str, Any]] = []

    def add_event(self, **kw: Any) -> None:
        self.notices.append(kw)


def test_the_notice_is_told_once_per_job() -> None:
    run = failing(0.5, 500, 2.0, attempts=4, steps=700)
    journal = Journal()
    status = run.status(end=False)
    assert tell(journal, status, 3) is True  # type: ignore[arg-type]
    [notice] = journal.notices
    assert notice["kind"] == SAVE_CADENCE and notice["attempt"] == 3
    assert notice["message"] == notice_message(status.save_cadence_json())
    run.events.append(event_types.Notice(at=run.t, attempt=3, notice=SAVE_CADENCE,
                                         message=notice["message"]))
    assert tell(journal, run.status(end=False), 3) is False  # type: ignore[arg-type]
    assert len(journal.notices) == 1
    assert tell(journal, None, 3) is False  # type: ignore[arg-type]


def test_one_failure_gives_the_advice_but_no_notice_yet() -> None:
    run = failing(0.5, 600, 2.0, attempts=2, steps=1900)
    c = run.cadence()
    assert c["failures"] == 1 and c["verdict"] == "too_sparse"
    assert notice_message(c) is None
    assert tell(Journal(), run.status(), 1) is False  # type: ignore[arg-type]


def test_the_report_has_the_cadence() -> None:
    run = failing(0.5, 500, 2.0, attempts=3, steps=700)
    status = run.status()
    html = render(status, sorted(run.events, key=lambda e: e.at))
    c = status.to_json()["save_cadence"]
    assert "<h2>Save cadence</h2>" in html and "data-verdict='too_sparse'" in html
    assert f"data-field='best_interval_steps' data-value='{c['best_interval_steps']}'" in html
    assert f"data-field='save_cost_s' data-value='{c['save_cost_s']}'" in html


def test_the_supervisors_call_writes_the_notice_into_the_log_once(tmp_path: Path) -> None:
    """What the supervisor does after a restart is scheduled: fold its own log
    (``journal.read_status``) and ``tell``; a second failure later says nothing more."""
    from fsdp_orch.record.events import EventWriter
    from fsdp_orch.record.journal import Journal, read_status

    run = failing(0.5, 500, 2.0, attempts=4, steps=700)
    writer = EventWriter(tmp_path, "supervisor")
    for event in sorted(run.events, key=lambda e: e.at):
        writer.append(event.KIND, at=event.at, **{**event.fields(), "job": "j"})
    journal = Journal(writer, "j")
    assert tell(journal, read_status(str(tmp_path), "j"), 3) is True
    assert tell(journal, read_status(str(tmp_path), "j"), 3) is False
    status = read_status(str(tmp_path), "j")
    assert status is not None
    [notice] = [n for n in status.notices if n.kind == SAVE_CADENCE]
    assert notice.attempt == 3 and notice.message == notice_message(status.save_cadence_json())
    assert f"attempt 3: save_cadence: {notice.message}" in detail_lines(status, now=run.t)
