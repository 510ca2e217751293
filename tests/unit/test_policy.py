"""Restart policy and backoff: pure functions, no waiting."""

from __future__ import annotations

import random

from fsdp_orch.jobspec.schema import RestartPolicy
from fsdp_orch.supervise.policy import FailureRecord, backoff_delay, decide, hosts_to_exclude


def policy(**kw) -> RestartPolicy:
    return RestartPolicy.model_validate(kw)


def rec(attempt: int, category: str = "hang", before: int | None = 0,
        after: int | None = 10) -> FailureRecord:
    return FailureRecord(attempt, category, before, after)


def test_retryable_failure_restarts_within_budget():
    d = decide(policy(max_restarts=3), [rec(0)], restarts_done=0)
    assert d.restart and "restart 1 of 3" in d.reason


def test_user_code_and_checkpoint_errors_are_never_retried():
    for category in ("user_code_error", "checkpoint_error"):
        d = decide(policy(retry_on=["hang", category]), [rec(0, category)], restarts_done=0)
        assert not d.restart and category in d.reason


def test_categories_outside_retry_on_give_up():
    d = decide(policy(retry_on=["hang"]), [rec(0, "nccl_error")], restarts_done=0)
    assert not d.restart and "retry_on" in d.reason


def test_budget_exhausted():
    history = [rec(i, before=i * 10, after=i * 10 + 10) for i in range(3)]
    d = decide(policy(max_restarts=2), history, restarts_done=2)
    assert not d.restart and "budget exhausted" in d.reason and "max_restarts=2" in d.reason


def test_cuda_oom_is_retried_at_most_once_by_default():
    assert decide(policy(), [rec(0, "cuda_oom")], restarts_done=0).restart
    d = decide(policy(), [rec(0, "cuda_oom"), rec(1, "cuda_oom", 10, 20)], restarts_done=1)
    assert not d.restart and "out of memory 2 times" in d.reason


def test_crash_loop_without_progress_past_the_same_checkpoint_gives_up():
    stuck = [rec(i, "unknown", before=40, after=40) for i in range(3)]
    d = decide(policy(max_restarts=10, crash_loop_attempts=3), stuck, restarts_done=2)
    assert not d.restart and "crash loop" in d.reason and "checkpoint step 40" in d.reason
    progressing = [rec(0, "unknown", 40, 40), rec(1, "unknown", 40, 50), rec(2, "unknown", 50, 50)]
    assert decide(policy(max_restarts=10, crash_loop_attempts=3), progressing,
                  restarts_done=2).restart



def test_saves_of_a_file_of_unknown_step_count_as_progress():
    """A checkpoint.file without a step: the supervisor passes -N for the Nth save it saw."""
    saving = [rec(0, "hang", None, -1), rec(1, "hang", -1, -2), rec(2, "hang", -2, -3)]
    assert decide(policy(max_restarts=10, crash_loop_attempts=3), saving, restarts_done=2).restart
    stuck = [rec(0, "hang", -1, -1), rec(1, "hang", -1, -1), rec(2, "hang", -1, -1)]
    d = decide(policy(max_restarts=10, crash_loop_attempts=3), stuck, restarts_done=2)
    assert not d.restart and "the same checkpoint (its step is unknown)" in d.reason


def test_backoff_grows_exponentially_up_to_max_without_jitter():
    p = policy(backoff={"initial": "2s", "max": "20s", "multiplier": 2, "jitter": 0})
    assert [backoff_delay(p, n, random.Random(0)) for n in range(1, 7)] == [
        2.0, 4.0, 8.0, 16.0, 20.0, 20.0]


def test_jitter_is_bounded_and_reproducible_with_an_injected_rng():
    p = policy(backoff={"initial": "1s", "max": "60s", "multiplier": 3, "jitter": "0.5s"})
    first = [backoff_delay(p, n, random.Random(7)) for n in range(1, 5)]
    again = [backoff_delay(p, n, random.Random(7)) for n in range(1, 5)]
    assert first == again
    for n, delay in enumerate(first, start=1):
        base = min(60.0, 3.0 ** (n - 1))
        assert base <= delay <= base + 0.5


def test_a_lost_host_is_excluded_once_and_only_for_a_lost_node():
    assert hosts_to_exclude("preemption_or_node_lost", ("10.0.0.3:22",), []) == ["10.0.0.3:22"]
    assert hosts_to_exclude("preemption_or_node_lost", ("a:22", "b:22", "a:22"), ["b:22"]) == [
        "a:22"]
    assert hosts_to_exclude("hang", ("10.0.0.3:22",), []) == []
    assert hosts_to_exclude("preemption_or_node_lost", (), []) == []


def test_no_restart_when_the_next_attempt_has_too_few_hosts():
    history = [rec(0, "preemption_or_node_lost")]
    d = decide(policy(max_restarts=3), history, restarts_done=0,
               cannot_place="cluster 'ssh' has 1 of its 2 hosts left (10.0.0.3:22 lost); "
                            "the job needs 2")
    assert (not d.restart
            and d.reason.startswith("cannot restart: cluster 'ssh' has 1 of its 2 hosts left"))
    assert decide(policy(max_restarts=3), history, restarts_done=0, cannot_place=None).restart
    # A failure the policy does not retry says so first.
    d = decide(policy(retry_on=["hang"]), history, restarts_done=0, cannot_place="too few hosts")
    assert not d.restart and "retry_on" in d.reason
