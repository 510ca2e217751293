"""Restart policy: what to do after a failure, and how long to wait. Pure: no clock, no sleep.

The budget counts failures without progress, not failures: an attempt that completed a new
checkpoint (or, for a job that has none yet, reached a step no attempt reached before) refills it,
so a job that moves forward between faults keeps going however many faults it meets, and one that
does not stops at the ``crash_loop_attempts``-th failure in a row without progress.
``max_restarts``, unset by default, is a hard cap on restarts of any kind.

A failure blamed on the checkpoint its attempt resumed from (``fell_back``: that checkpoint was
set aside, checkpoints.suspect) is retried whatever its category, since the next attempt loads
another checkpoint; it is a failure without progress, and a checkpoint counts as progress only
past the highest step set aside (``past_floor``), so a job that falls back, saves the same steps
again and fails again still meets the crash-loop rule.

The delay is exponential (``initial * multiplier**(n-1)``, capped at ``max``: tenacity's
``wait_exponential``, through ``vocab.backoff``) in ``n``, the failures in a row without progress
(1 after an attempt that made progress), plus a uniform jitter drawn from an injected random
generator. The restart loop itself is not a tenacity retry: each failure is classified, recorded
and decided on before the wait.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from fsdp_orch.decide.after_failure import MOVES_HOSTS
from fsdp_orch.jobspec.schema import RestartPolicy
from fsdp_orch.vocab.backoff import Retries
from fsdp_orch.vocab.categories import NOT_RETRYABLE, FailureCategory

# Not a failure of the job's: an attempt ended at a checkpoint to leave a straggler's node out.
_NOT_COUNTED = frozenset({FailureCategory.STRAGGLER_REPLACED.value})


def new_checkpoint(before: int | None, after: int | None) -> bool:
    """Whether ``after`` is a checkpoint completed since ``before`` (-N: the Nth save of a file of
    unknown step, so any other mark is a new save)."""
    if after is None or after == before:
        return False
    if before is None or after < 0 or before < 0:
        return True
    return after > before


@dataclass(frozen=True)
class FailureRecord:
    attempt: int
    category: str
    checkpoint_before: int | None  # latest complete checkpoint step when the attempt started
    # ... and when it failed (-N: the Nth save of a file of unknown step)
    checkpoint_after: int | None
    step_before: int | None = None  # the highest step any earlier attempt reached
    step_after: int | None = None  # the highest step this attempt reached
    fell_back: bool = False  # blamed on the checkpoint it resumed from, which was set aside
    counted: bool = True  # False: the cluster took its nodes (an eviction), no failure of the job's

    @property
    def progressed(self) -> bool:
        """A new complete checkpoint; for a job that has none, a step no attempt reached before."""
        if self.checkpoint_before is not None or self.checkpoint_after is not None:
            return new_checkpoint(self.checkpoint_before, self.checkpoint_after)
        return self.step_after is not None and (self.step_before is None
                                                or self.step_after > self.step_before)


@dataclass(frozen=True)
class Decision:
    restart: bool
    reason: str
    without_progress: int = 0  # the failures in a row without progress, the current one included


def past_floor(mark: int | None, floor: int | None) -> int | None:
    """A checkpoint mark as progress counts it: raised to ``floor``, the highest step of a
    checkpoint set aside (a mark of a file of unknown step, negative, is left as it is)."""
    if floor is None or (mark is not None and mark < 0):
        return mark
    return floor if mark is None else max(mark, floor)


def as_progress(record: FailureRecord, floor: int | None, fell_back: bool) -> FailureRecord:
    """``record`` as the budget weighs it: its checkpoint marks raised to ``floor`` (the highest
    step set aside so far), and with ``fell_back`` (blamed on the checkpoint it resumed from) no
    progress, whatever it saved from that checkpoint's weights."""
    before = past_floor(record.checkpoint_before, floor)
    after = before if fell_back else past_floor(record.checkpoint_after, floor)
    return replace(record, checkpoint_before=before, checkpoint_after=after, fell_back=fell_back)


def without_progress(history: list[FailureRecord]) -> list[FailureRecord]:
    """The failures since the last one whose attempt made progress (in order)."""
    streak: list[FailureRecord] = []
    for failure in reversed(history):
        if failure.progressed:
            break
        if failure.counted and failure.category not in _NOT_COUNTED:
            streak.append(failure)
    return streak[::-1]


def backoff_step(history: list[FailureRecord]) -> int:
    """Which step of the backoff the next restart waits: 1 after an attempt that made progress,
    then one more for each failure in a row without progress."""
    return max(1, len(without_progress(history)))


def decide(policy: RestartPolicy, history: list[FailureRecord], restarts_done: int,
           cannot_place: str | None = None) -> Decision:
    """``history`` holds every failure of the job so far, the current one last.
    ``cannot_place``: why the next attempt has nowhere to run (too few hosts left after
    the lost ones), if it has not."""
    current = history[-1]
    streak = without_progress(history)
    stuck = len(streak)
    if not current.fell_back and (current.category in NOT_RETRYABLE
                                  or current.category not in policy.retry_on):
        return Decision(False, f"{current.category} is not retried (restart.retry_on)", stuck)
    if cannot_place is not None:
        return Decision(False, f"cannot restart: {cannot_place}", stuck)
    cap = policy.max_restarts
    if cap is not None and restarts_done >= cap:
        return Decision(False, f"restart budget exhausted: {restarts_done} of restart.max_restarts="
                               f"{cap} restarts used", stuck)
    if current.category == FailureCategory.CUDA_OOM:
        ooms = sum(1 for f in streak if f.category == FailureCategory.CUDA_OOM)
        if ooms > policy.max_oom_restarts:
            return Decision(False, f"CUDA out of memory {ooms} times without progress "
                                   f"(restart.max_oom_restarts={policy.max_oom_restarts}); a "
                                   "restart would fail the same way", stuck)
    limit = policy.crash_loop_attempts
    if stuck >= limit:
        after = current.checkpoint_after
        where = ("the start (no checkpoint was ever completed)" if after is None
                 else f"checkpoint step {after}" if after >= 0
                 else "the same checkpoint (its step is unknown)")
        if after is None and current.step_before is not None:
            where = (f"step {current.step_before}, the furthest an attempt reached "
                     "(no checkpoint was ever completed)")
        return Decision(False, f"crash loop: {limit} attempts in a row made no progress past "
                               f"{where} (restart.crash_loop_attempts={limit})", stuck)
    number = f"restart {restarts_done + 1}" + (f" of {cap}" if cap is not None else "")
    progress = ("after progress" if not stuck
                else f"{stuck} of {limit} failures in a row without progress")
    earlier = ", from the checkpoint before the one it resumed" if current.fell_back else ""
    return Decision(True, f"{number} after {current.category}{earlier} ({progress})", stuck)


def hosts_to_exclude(category: str, lost: tuple[str, ...], excluded: list[str]) -> list[str]:
    """The hosts a failure adds to those later attempts are planned without: the ones its attempt
    found lost (or a straggler's, replaced), when the failure is a lost node or a straggler
    replaced, and not left out already."""
    if category not in MOVES_HOSTS:
        return []
    return [host for host in dict.fromkeys(lost) if host not in excluded]


def backoff_delay(policy: RestartPolicy, step: int, rng: random.Random) -> float:
    """Seconds to wait at backoff step ``step`` (1: after progress, or the first failure)."""
    b = policy.backoff
    exponential = Retries(first=b.initial, most=b.max, factor=b.multiplier).delay(step)
    return exponential + (rng.uniform(0.0, b.jitter) if b.jitter > 0 else 0.0)
