"""How often to save, at a failure rate: Young's first-order optimum, written once here for the
runtime's ``checkpoint.interval: auto`` and for the advice given to scripts that save by
themselves. Pure: no clock, no torch.

A save that blocks training for ``C`` seconds, in a job that fails every ``M`` seconds on average,
loses about ``C / T`` of the time to saving and ``T / (2M)`` to the work redone after a failure
when it saves every ``T`` seconds; the sum is least at ``T = sqrt(2 C M)`` (J. W. Young, "A first
order approximation to the optimum checkpoint interval", CACM 1974; Daly 2006 adds higher-order
terms that matter only when ``C`` nears ``M``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SaveInterval:
    """An interval in steps and seconds, and why it was chosen."""

    steps: int
    seconds: float
    why: str


def young_seconds(save_cost_s: float, mtbf_s: float) -> float:
    """The interval in seconds that loses the least to saves and redone work: sqrt(2 C M)."""
    if save_cost_s < 0 or mtbf_s <= 0:
        raise ValueError(f"expected a save cost >= 0 and a time between failures > 0, "
                         f"got {save_cost_s!r} and {mtbf_s!r}")
    return math.sqrt(2.0 * save_cost_s * mtbf_s)


def expected_loss_fraction(interval_s: float, save_cost_s: float, mtbf_s: float) -> float:
    """The share of the wall time lost to saves and to the work redone after failures, saving every
    ``interval_s`` seconds of training (first order: C/T + T/2M)."""
    if interval_s <= 0:
        raise ValueError(f"expected an interval > 0, got {interval_s!r}")
    return save_cost_s / interval_s + interval_s / (2.0 * mtbf_s)


def interval_in_steps(save_cost_s: float, mtbf_s: float, step_s: float, *,
                      min_steps: int, max_steps: int, mtbf_note: str = "") -> SaveInterval:
    """Young's interval as whole steps of ``step_s`` seconds, held within
    ``min_steps``..``max_steps``, with the reason in words (``mtbf_note``: where the time between
    failures came from, said after it)."""
    if step_s <= 0:
        raise ValueError(f"expected a step time > 0, got {step_s!r}")
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"expected 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
    ideal_s = young_seconds(save_cost_s, mtbf_s)
    ideal = max(1, round(ideal_s / step_s))
    steps = min(max(ideal, min_steps), max_steps)
    note = f" ({mtbf_note})" if mtbf_note else ""
    why = (f"sqrt(2 x save {save_cost_s:.3g}s x time between failures {mtbf_s:.4g}s{note}) = "
           f"{ideal_s:.3g}s = {ideal} step(s) of {step_s:.3g}s")
    if steps != ideal:
        bound = "at least" if steps == min_steps else "at most"
        why += f", held to {bound} {steps}"
    return SaveInterval(steps, steps * step_s, why)


# What the supervisor sets for an attempt after a failure (launch.plan): the job's time between
# failures so far, in seconds, from :func:`observed_mtbf`; the runtime reads it.
OBSERVED_MTBF_ENV = "FSDP_ORCH_OBSERVED_MTBF_S"

# The time between failures assumed until a job has failed (``checkpoint.auto_mtbf``'s default):
# about Llama 3's 3 h on 16k GPUs (419 interruptions in 54 days), so pessimistic for smaller jobs,
# which then save a little more often than they need to rather than lose more work than they must.
DEFAULT_AUTO_MTBF_S = 4 * 3600.0

# ``checkpoint.interval: auto`` in the runtime. Its bounds are fixed: at least one step, at most an
# hour of training between saves (the work a failure that no statistics foresaw, the first one or a
# preemption, can cost). Its first save comes AUTO_FIRST_SAVE_STEPS steps into an attempt: there is
# no save cost to go by before one is measured, and an early checkpoint is what a job that fails in
# its first minutes needs most. A new choice replaces the one in force only when it differs by
# more than AUTO_CHANGE (a fifth): save costs and step times jitter, and each change is told.
AUTO_MIN_STEPS = 1
AUTO_MAX_SECONDS = 3600.0
AUTO_FIRST_SAVE_STEPS = 10
AUTO_CHANGE = 0.2
AUTO_COST_SAMPLES = 3  # the save cost: the median of the last three saves' blocking seconds


def observed_mtbf(first_started_at: float | None, now: float, failures: int) -> float | None:
    """The job's time between failures as observed so far: the time since its first attempt
    started over the failures since; None before the first failure (or with no start known)."""
    if failures <= 0 or first_started_at is None or now <= first_started_at:
        return None
    return (now - first_started_at) / failures


def auto_interval(save_cost_s: float, mtbf_s: float, step_s: float, *,
                  observed: bool) -> SaveInterval:
    """``interval: auto``'s choice from the blocking seconds of a save (the runtime passes the
    median of its last AUTO_COST_SAMPLES), the time between failures (``observed``: the job's
    own, else the assumed ``checkpoint.auto_mtbf``) and the step time, within the fixed bounds."""
    most = max(AUTO_MIN_STEPS, int(AUTO_MAX_SECONDS // step_s))
    return interval_in_steps(save_cost_s, mtbf_s, step_s, min_steps=AUTO_MIN_STEPS, max_steps=most,
                             mtbf_note="observed" if observed else "assumed: checkpoint.auto_mtbf")


def worth_changing(current: int | None, proposed: int) -> bool:
    """Whether ``proposed`` replaces the interval in force (None: none chosen yet)."""
    if current is None:
        return True
    return abs(proposed - current) > AUTO_CHANGE * current


__all__ = ["AUTO_CHANGE", "AUTO_COST_SAMPLES", "AUTO_FIRST_SAVE_STEPS", "AUTO_MAX_SECONDS",
           "AUTO_MIN_STEPS", "DEFAULT_AUTO_MTBF_S", "OBSERVED_MTBF_ENV", "SaveInterval",
           "auto_interval", "expected_loss_fraction", "interval_in_steps", "observed_mtbf",
           "worth_changing", "young_seconds"]
