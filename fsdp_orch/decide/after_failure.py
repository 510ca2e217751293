"""Where a failed attempt's job goes before the restart budget is weighed: back through the
scheduler's queue, on at once without a straggler's node, or to the restart policy
(``decide.policy.decide``). Pure: the supervisor gathers the facts a category needs
(``needs_allocation_check``, ``needs_placement``), asks :func:`route`, and acts on the answer.
"""

from __future__ import annotations

from enum import Enum

from fsdp_orch.vocab.categories import FailureCategory

# The failures that move the job off hosts: a lost node, a straggler replaced at a checkpoint.
MOVES_HOSTS = frozenset({FailureCategory.PREEMPTION_OR_NODE_LOST.value,
                         FailureCategory.STRAGGLER_REPLACED.value})


class Route(Enum):
    REQUEUE = "requeue"  # the scheduler ends this allocation: the next one resumes, no budget used
    # no host left for the next attempt here: back through the queue without the hosts left out,
    # where the kind can (else, or refused, the policy decides with why it cannot be placed)
    REQUEUE_WITHOUT = "requeue_without"
    LEAVE_OUT = "leave_out"  # a straggler's node left out, the job restarted: no budget used
    # the cluster took the attempt's nodes (an eviction, a drain): a new attempt, no budget used
    TAKEN = "taken"
    POLICY = "policy"  # the restart policy decides


def needs_allocation_check(category: str) -> bool:
    """Whether to ask the scheduler if the allocation is ending (a lost node can be its notice)."""
    return category == FailureCategory.PREEMPTION_OR_NODE_LOST


def needs_placement(category: str, allocation_ending: bool) -> bool:
    """Whether to plan the next attempt on the hosts that are left before deciding (not when the
    allocation ends: the next one has hosts of its own)."""
    return category in MOVES_HOSTS and not allocation_ending


def route(category: str, *, allocation_ending: bool, cannot_place: str | None,
          hosts_left_out: bool, taken: bool = False) -> Route:
    """``allocation_ending``: the scheduler said so (asked where ``needs_allocation_check``);
    ``cannot_place``: why the next attempt has nowhere to run (asked where ``needs_placement``);
    ``hosts_left_out``: some host is left out of the job's attempts already; ``taken``: the
    cluster's engine says it took the attempt's nodes (``EngineEnding.taken``)."""
    if category == FailureCategory.PREEMPTION_OR_NODE_LOST and allocation_ending:
        return Route.REQUEUE
    if taken and not cannot_place:
        return Route.TAKEN
    if cannot_place and hosts_left_out:
        return Route.REQUEUE_WITHOUT
    if category == FailureCategory.STRAGGLER_REPLACED and not cannot_place:
        return Route.LEAVE_OUT
    return Route.POLICY


__all__ = ["MOVES_HOSTS", "Route", "needs_allocation_check", "needs_placement", "route"]
