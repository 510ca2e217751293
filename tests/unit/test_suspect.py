"""Whether a resume went wrong and whose fault it is (checkpoints.suspect), the console lines it
reads (observe.console_health), and how the restart policy weighs a fall-back (decide.policy)."""

from __future__ import annotations

import math

import pytest

from fsdp_orch.checkpoints.suspect import (
    CRASH_STEPS,
    LossJudge,
    Point,
    Reference,
    blamed_crash,
    far_from,
    reference_at,
)
from fsdp_orch.decide.policy import FailureRecord, as_progress, decide, past_floor
from fsdp_orch.jobspec.schema import RestartPolicy
from fsdp_orch.observe.console_health import parse_grad_norm, runtime_set_aside

NAN = math.nan
REF = Reference(step=100, loss=2.0, spread=0.1)


def judged(judge: LossJudge, points: list[Point]):  # type: ignore[no-untyped-def]
    verdicts = [v for v in (judge.look(p) for p in points) if v is not None]
    assert len(verdicts) <= 1
    return verdicts[0] if verdicts else None


def test_a_nan_loss_at_the_first_point_after_a_resume_blames_the_checkpoint():
    verdict = judged(LossJudge(100, REF), [Point(101, NAN)])
    assert verdict is not None and verdict.category == "nonfinite_loss" and verdict.suspect
    assert "loss nan at step 101" in verdict.evidence and "resume from step 100" in verdict.evidence


def test_the_trainers_hidden_nan_is_caught_by_its_grad_norm_twice_in_a_row():
    # logging_nan_inf_filter shows 0.0 for the loss; the grad norm stays NaN
    judge = LossJudge(8, None)
    assert judge.look(Point(9, 0.0, NAN)) is None  # once is no verdict: an fp16 skipped step
    assert judge.first_nonfinite == Point(9, 0.0, NAN)
    verdict = judge.look(Point(10, 0.0, NAN))
    assert verdict is not None and verdict.suspect and "grad norm nan" in verdict.evidence


def test_first_losses_far_from_the_saved_ones_are_a_jump_either_way():
    assert judged(LossJudge(100, REF), [Point(101, 2.1), Point(102, 1.9), Point(103, 2.05)]) is None
    up = judged(LossJudge(100, REF), [Point(101, 4.2), Point(102, 4.1), Point(103, 4.0)])
    assert up is not None and up.category == "loss_jump" and up.suspect
    down = judged(LossJudge(100, REF), [Point(101, 0.0), Point(102, 0.0), Point(103, 0.0)])
    assert down is not None and down.category == "loss_jump"


def test_no_jump_without_a_reference_nor_within_the_noise_of_the_saved_losses():
    assert judged(LossJudge(100, None), [Point(101 + i, 9.0) for i in range(5)]) is None
    noisy = Reference(step=100, loss=2.0, spread=0.8)  # 3 x 0.8 > |3.2 - 2.0|
    assert judged(LossJudge(100, noisy), [Point(101 + i, 3.2) for i in range(3)]) is None
    assert not far_from([], REF)


def test_past_the_first_points_a_nan_ends_the_attempt_only_when_it_lasts_and_is_not_blamed():
    judge = LossJudge(100, REF)
    healthy = [Point(101 + i, 2.0) for i in range(5)]
    assert judged(judge, healthy) is None
    assert judge.look(Point(106, NAN)) is None  # once: a notice, no verdict
    verdict = judge.look(Point(107, NAN))
    assert verdict is not None and not verdict.suspect and "2 times in a row" in verdict.evidence
    # grad norms: three in a row (an fp16 scaler skips one step at a time)
    judge = LossJudge(None, None)
    assert judged(judge, [Point(1, 2.0, math.inf), Point(2, 2.0, 1.0), Point(3, 2.0, math.inf),
                          Point(4, 2.0, math.inf)]) is None
    verdict = judge.look(Point(5, 2.0, NAN))
    assert verdict is not None and not verdict.suspect


def test_lines_before_the_resumed_step_are_not_judged_and_a_verdict_is_given_once():
    judge = LossJudge(100, REF)
    assert judge.look(Point(100, NAN)) is None and judge.points == 0
    assert judge.look(Point(101, NAN)) is not None
    assert judge.look(Point(102, NAN)) is None and judge.verdict is not None


@pytest.mark.parametrize("category,reached,new,blamed", [
    ("checkpoint_error", None, False, True),  # the load failed before any step
    ("crashed_signal", 100 + CRASH_STEPS, False, True),
    ("unknown", 100 + CRASH_STEPS + 1, False, False),  # far past it: not the checkpoint's
    ("checkpoint_error", 101, True, False),  # it saved a checkpoint of its own
    ("user_code_error", 101, False, False),  # the same code fails from any checkpoint
    ("preemption_or_node_lost", 101, False, False),
    ("injected_fault", 101, False, False),
])
def test_a_failure_blames_the_resumed_checkpoint_only_early_and_when_a_checkpoint_can_cause_it(
        category, reached, new, blamed):
    assert blamed_crash(category, 100, reached, new) is blamed
    assert not blamed_crash(category, None, reached, new)  # no resume, nothing to blame


def test_the_reference_is_the_latest_attempts_last_losses_up_to_the_saved_step():
    points = {0: [(90, 2.4), (95, 2.2), (98, 2.0), (100, 1.9), (110, 1.5)],
              1: [(120, NAN), (130, 1.2)]}
    ref = reference_at(points, 100)
    assert ref == Reference(100, 2.0, pytest.approx(0.3))
    assert reference_at({0: [(5, 1.0)]}, 3) is None


def test_grad_norms_and_the_runtimes_set_aside_lines_are_read():
    assert math.isnan(parse_grad_norm("{'loss': '0', 'grad_norm': 'nan', 'epoch': '0.1'}"))
    assert parse_grad_norm("{'loss': 1.2, 'grad_norm': np.float64(3.5), 'epoch': 1}") == 3.5
    assert parse_grad_norm(" iteration 10 | lm loss: 7.1E+00 | grad norm: 1.234 |") == 1.234
    assert parse_grad_norm("--max_grad_norm=1.0") is None
    line = ("[fsdp-orch] warning: checkpoint /c/step-00000020 would not load (load failed "
            "(CheckpointException: x ... RuntimeError: y)): moved to "
            "/c/.fsdp-orch-suspect/step-00000020.attempt-1 and kept; restored /c/step-10 instead")
    assert runtime_set_aside(line) == (
        "/c/step-00000020", "load failed (CheckpointException: x ... RuntimeError: y)",
        "/c/.fsdp-orch-suspect/step-00000020.attempt-1")
    assert runtime_set_aside("[fsdp-orch] resumed from /c/step-10 (step 10)") is None


def test_falling_back_is_retried_without_progress_and_the_crash_loop_still_stops_it():
    policy = RestartPolicy()
    load_error = as_progress(FailureRecord(1, "checkpoint_error", 20, 20), None, True)
    assert decide(policy, [load_error], restarts_done=1).restart  # not retried unless it fell back
    assert not decide(policy, [FailureRecord(1, "checkpoint_error", 20, 20)], 1).restart
    # the attempt after it resumed from 10 and saved 20 again: no progress past the floor (20)
    again = as_progress(FailureRecord(2, "nonfinite_loss", 10, 20), 20, False)
    assert (again.checkpoint_before, again.checkpoint_after, again.progressed) == (20, 20, False)
    third = as_progress(FailureRecord(3, "nonfinite_loss", 20, 20), 20, True)
    decision = decide(policy, [load_error, again, third], restarts_done=3)
    assert not decision.restart and "crash loop" in decision.reason
    # past the floor, progress again
    assert as_progress(FailureRecord(4, "hang", 10, 30), 20, False).progressed
    # a fall-back saved nothing of its own, whatever it wrote from the suspect's weights
    assert not as_progress(FailureRecord(5, "loss_jump", 20, 40), None, True).progressed
    assert past_floor(None, 20) == 20 and past_floor(-2, 20) == -2 and past_floor(5, None) == 5
