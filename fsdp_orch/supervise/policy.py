"""Restart policy: what to do after a failure, and how long to wait. Pure: no clock, no sleep.

The delay is exponential (``initial * multiplier**(n-1)``, capped at ``max``: tenacity's
``wait_exponential``, through ``vocab.backoff``) plus a uniform jitter drawn from an injected random
generator. The restart loop itself is not a tenacity retry: each failure is classified, recorded
and decided on before the wait.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from fsdp_orch.jobspec.schema import RestartPolicy
from fsdp_orch.vocab.backoff import Retries
from fsdp_orch.vocab.categories import NOT_RETRYABLE


@dataclass(frozen=True)
class FailureRecord:
    attempt: int
    category: str
    checkpoint_before: int | None  # latest complete checkpoint step when the attempt started
    # ... and when it failed (-N: the Nth save of a file of unknown step)
    checkpoint_after: int | None


@dataclass(frozen=True)
class Decision:
    restart: bool
    reason: str


def decide(policy: RestartPolicy, history: list[FailureRecord], restarts_done: int,
           cannot_place: str | None = None) -> Decision:
    """``history`` holds every failure of the job so far, the current one last.
    ``cannot_place``: why the next attempt has nowhere to run (too few hosts left after
    the lost ones), if it has not."""
    current = history[-1]
    if current.category in NOT_RETRYABLE or current.category not in policy.retry_on:
        return Decision(False, f"{current.category} is not retried (restart.retry_on)")
    if cannot_place is not None:
        return Decision(False, f"cannot restart: {cannot_place}")
    if restarts_done >= policy.max_restarts:
        return Decision(False, f"restart budget exhausted: {restarts_done} of restart.max_restarts="
                               f"{policy.max_restarts} restarts used")
    if current.category == "cuda_oom":
        ooms = sum(1 for f in history if f.category == "cuda_oom")
        if ooms > policy.max_oom_restarts:
            return Decision(False, f"CUDA out of memory {ooms} times (restart.max_oom_restarts="
                                   f"{policy.max_oom_restarts}); a restart would fail the same way")
    streak = policy.crash_loop_attempts
    recent = history[-streak:]
    if len(recent) == streak and all(f.checkpoint_after == f.checkpoint_before for f in recent):
        after = current.checkpoint_after
        where = ("the start (no checkpoint was ever completed)" if after is None
                 else f"checkpoint step {after}" if after >= 0
                 else "the same checkpoint (its step is unknown)")
        return Decision(False,
                        f"crash loop: {streak} attempts in a row made no progress past {where}")
    return Decision(True, f"restart {restarts_done + 1} of "
                          f"{policy.max_restarts} after {current.category}")


def hosts_to_exclude(category: str, lost: tuple[str, ...], excluded: list[str]) -> list[str]:
    """The hosts a failure adds to those later attempts are planned without: the ones its attempt
    found lost (or a straggler's, replaced), when the failure is a lost node or a straggler
    replaced, and not left out already."""
    if category not in ("preemption_or_node_lost", "straggler_replaced"):
        return []
    return [host for host in dict.fromkeys(lost) if host not in excluded]


def backoff_delay(policy: RestartPolicy, restart_number: int, rng: random.Random) -> float:
    """Seconds to wait before restart number ``restart_number`` (1 for the first restart)."""
    b = policy.backoff
    exponential = Retries(first=b.initial, most=b.max, factor=b.multiplier).delay(restart_number)
    return exponential + (rng.uniform(0.0, b.jitter) if b.jitter > 0 else 0.0)
