"""Restart policy and backoff: pure functions, no waiting."""

from __future__ import annotations

import random

from fsdp_orch.decide.policy import (
    FailureRecord,
    backoff_delay,
    backoff_step,
    decide,
    hosts_to_exclude,
)
from fsdp_orch.jobspec.schema import RestartPolicy


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


def test_cuda_oom_is_retried_at_most_once_without_progress_by_default():
    assert decide(policy(), [rec(0, "cuda_oom", 10, 10)], restarts_done=0).restart
    d = decide(policy(), [rec(0, "cuda_oom", 10, 10), rec(1, "cuda_oom", 10, 10)],
               restarts_done=1)
    assert not d.restart and "out of memory 2 times without progress" in d.reason
    # an out-of-memory after a new checkpoint (a rare long batch) starts the count again
    assert decide(policy(), [rec(0, "cuda_oom", 0, 10), rec(1, "cuda_oom", 10, 20)],
                  restarts_done=1).restart


def test_a_job_that_progresses_between_faults_never_exhausts_the_default_budget():
    """A month at one fault every three hours: 240 faults, each after a new checkpoint."""
    history = [rec(i, ("hang", "killed_sigkill", "crashed_signal")[i % 3], i * 10, i * 10 + 10)
               for i in range(240)]
    for n in range(1, 241):
        d = decide(policy(), history[:n], restarts_done=n - 1)
        assert d.restart and d.without_progress == 0, d
    assert d.reason == "restart 240 after crashed_signal (after progress)"


def test_failures_without_progress_in_a_row_stop_the_job_and_progress_refills_the_budget():
    p = policy()  # crash_loop_attempts 3
    history = [rec(0, "hang", 0, 10), rec(1, "hang", 10, 10), rec(2, "hang", 10, 10)]
    d = decide(p, history, restarts_done=2)
    assert d.restart and d.without_progress == 2
    assert d.reason == "restart 3 after hang (2 of 3 failures in a row without progress)"
    d = decide(p, [*history, rec(3, "hang", 10, 10)], restarts_done=3)
    assert not d.restart and d.reason.startswith(
        "crash loop: 3 attempts in a row made no progress past checkpoint step 10")
    refilled = [*history, rec(3, "hang", 10, 20), rec(4, "hang", 20, 20), rec(5, "hang", 20, 20)]
    assert decide(p, refilled, restarts_done=5).restart


def test_the_hard_cap_holds_when_set_even_with_progress():
    history = [rec(i, before=i * 10, after=i * 10 + 10) for i in range(6)]
    assert decide(policy(), history, restarts_done=5).restart  # no cap by default
    d = decide(policy(max_restarts=5), history, restarts_done=5)
    assert not d.restart and "max_restarts=5" in d.reason


def test_without_checkpoints_a_step_no_attempt_reached_before_is_progress():
    def stepped(attempt, before, after):
        return FailureRecord(attempt, "crashed_signal", None, None, before, after)
    further = [stepped(0, None, 40), stepped(1, 40, 80), stepped(2, 80, 120), stepped(3, 120, 160)]
    assert decide(policy(), further, restarts_done=3).without_progress == 0
    short = [stepped(0, None, 40), stepped(1, 40, 30), stepped(2, 40, 40), stepped(3, 40, 12)]
    d = decide(policy(), short, restarts_done=3)
    assert not d.restart and "past step 40, the furthest an attempt reached" in d.reason
    # an attempt that never stepped made no progress
    assert not FailureRecord(0, "hang", None, None, None, None).progressed


def test_the_backoff_grows_only_over_failures_without_progress():
    p = policy(backoff={"initial": "1s", "max": "60s", "multiplier": 2, "jitter": 0})
    history = [rec(0, "hang", 0, 10), rec(1, "hang", 10, 10), rec(2, "hang", 10, 10),
               rec(3, "hang", 10, 20), rec(4, "hang", 20, 30)]
    delays = [backoff_delay(p, backoff_step(history[:n]), random.Random(0)) for n in range(1, 6)]
    assert delays == [1.0, 1.0, 2.0, 1.0, 1.0]


def test_a_straggler_replaced_is_not_a_failure_without_progress():
    history = [rec(0, "hang", 10, 10), rec(1, "straggler_replaced", 10, 10),
               rec(2, "hang", 10, 10)]
    assert decide(policy(), history, restarts_done=2).without_progress == 2


def test_the_defaults_are_made_for_a_long_run():
    p = policy()
    assert p.max_restarts is None and p.crash_loop_attempts == 3
    assert p.backoff.initial == 1.0 and p.backoff.jitter == 1.0


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


def test_a_lost_node_when_the_scheduler_ends_the_allocation_is_requeued_unplanned():
    from fsdp_orch.decide.after_failure import Route, needs_allocation_check, needs_placement, route

    lost = "preemption_or_node_lost"
    assert needs_allocation_check(lost) and not needs_allocation_check("hang")
    assert not needs_placement(lost, allocation_ending=True)  # the next allocation has its hosts
    assert route(lost, allocation_ending=True, cannot_place=None,
                 hosts_left_out=True) is Route.REQUEUE


def test_no_host_left_goes_through_the_queue_without_the_left_out_ones_else_to_the_policy():
    from fsdp_orch.decide.after_failure import Route, needs_placement, route

    for category in ("preemption_or_node_lost", "straggler_replaced"):
        assert needs_placement(category, allocation_ending=False)
        assert route(category, allocation_ending=False, cannot_place="2 nodes, 1 host left",
                     hosts_left_out=True) is Route.REQUEUE_WITHOUT
        # nowhere to run and nothing left out to requeue without: the policy gives up with why
        assert route(category, allocation_ending=False, cannot_place="2 nodes, 1 host left",
                     hosts_left_out=False) is Route.POLICY
    assert not needs_placement("hang", allocation_ending=False)
    assert route("hang", allocation_ending=False, cannot_place=None,
                 hosts_left_out=True) is Route.POLICY


def test_a_straggler_with_somewhere_to_go_restarts_without_the_budget():
    from fsdp_orch.decide.after_failure import Route, route

    assert route("straggler_replaced", allocation_ending=False, cannot_place=None,
                 hosts_left_out=True) is Route.LEAVE_OUT
    assert route("preemption_or_node_lost", allocation_ending=False, cannot_place=None,
                 hosts_left_out=True) is Route.POLICY


def test_pods_the_cluster_took_restart_without_the_budget_and_are_no_failure_in_a_row():
    from dataclasses import replace

    from fsdp_orch.decide.after_failure import Route, route

    lost = "preemption_or_node_lost"
    assert route(lost, allocation_ending=False, cannot_place=None, hosts_left_out=False,
                 taken=True) is Route.TAKEN
    assert route(lost, allocation_ending=True, cannot_place=None, hosts_left_out=False,
                 taken=True) is Route.REQUEUE  # the scheduler's own requeue first
    evicted = replace(rec(1, lost, 10, 10), counted=False)
    history = [rec(0, "hang", 10, 10), evicted, rec(2, "hang", 10, 10)]
    assert decide(policy(), history, restarts_done=1).without_progress == 2
    assert backoff_step([rec(0, "hang", 10, 10), evicted]) == 1
