"""What a job's save cadence costs, and the interval that would cost least at the failure rate seen.
Pure: no clock, no files. ``record.fold`` gathers the facts (``SaveFacts``: ``note_progress``,
``note_checkpoint``); ``JobStatus.save_cadence_json`` says what they add up to (``summarize``),
with Young's interval from ``vocab.save_interval``.

- The cadence: the steps between consecutive complete checkpoints (any attempts), and the wall
  seconds between two committed in the same attempt (the supervisor's polls: +-1 poll).
- A save's cost, the seconds it held training: measured where the runtime saves (rank 0's blocked
  seconds in its progress, over the checkpoints its attempts committed); for a script that saves by
  itself, estimated from the step gap that holds the save: rank 0's progress brackets the step of
  the checkpoint (the last progress before the step, the first after it), and the gap's seconds
  less its steps at the typical step time (the median seconds per step of the gaps near it that
  hold no save) are the save's. Anything else in that gap (an evaluation, a slow step) counts too.
- The failure rate: the restartable failures (a bug that fails every attempt is not one a save
  helps with, nor a straggler replaced at a checkpoint) over the attempts' wall time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up; status imports this
if TYPE_CHECKING:
    from collections.abc import Iterable

    from fsdp_orch.record.goodput import AttemptRecord
    from fsdp_orch.record.journal import Journal
    from fsdp_orch.record.status import Failure, JobStatus

RING = 32  # the running attempt's latest progress samples kept (one per 5 s at most: 160 s or more)
KEEP = 16  # intervals and timed saves kept; the figures are their medians
MIN_CLEAN_GAPS = 2  # gaps without a save needed for the typical step time near a save
# ... of which the nearest NEAR: the step time drifts with the load (0.23 to 0.48 s a step within
# minutes on this machine), and the median of the nearest 4 timed the saves of two real jobs with
# 0.88 s mean absolute error against 1.12 s for the median of all 32 samples' gaps
NEAR = 4
# An estimate gives advice once this many saves are timed and it stands out of its noise (more
# than twice its standard error): a save shorter than the steps' noise reads as about 0, and
# Young's interval at a cost of 0 is "save at every step"
MIN_SAVES_TIMED = 3
# "Noticeably worse": the cadence loses more than RATIO times what the best one would, and more
# than FLOOR of the wall time besides. (k + 1/k) / 2 = 1.5 at k = 2.6: the interval is 2.6 times
# too long or too short. With 2 failures the 90% interval of the failure rate (chi-square) puts
# the best interval within 0.56..2.4 times the one given, so 2.6 times off is outside it;
# with 1 failure it spans 0.46..4.4: status gives the advice, the notice waits for a second one.
RATIO = 1.5
FLOOR = 0.01  # 36 s an hour: less is not worth changing a script for
NOTICE_FAILURES = 2
MAX_STEPS = 10**9


@dataclass
class SaveFacts:
    """What the fold keeps of a job's saves and progress (in the index's record, so lists, not
    tuples: it goes through JSON)."""

    attempt: int | None = None  # the attempt ``samples`` are of
    samples: list[list[float]] = field(default_factory=list)  # its progress: [step, at], RING
    # its checkpoints' steps from its oldest sample kept on (2 x RING at most)
    saved: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)  # those no progress has passed yet
    last: list[Any] | None = None  # the latest checkpoint: [attempt, step or None, at]
    checkpoints: int = 0
    interval_steps: list[int] = field(default_factory=list)
    interval_s: list[float] = field(default_factory=list)
    # each save timed from its step gap: [gap seconds, gap steps, typical seconds per step,
    # saves in the gap]
    gaps: list[list[float]] = field(default_factory=list)
    per_attempt: list[int] = field(default_factory=list)  # checkpoints committed in each attempt
    measured: bool = False  # the runtime reports its saves' blocked seconds

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> SaveFacts:
        return cls() if not record else cls(**record)


def note_progress(facts: SaveFacts, attempt: int | None, step: int, at: float,
                  measured: bool = False) -> None:
    """Rank 0 reached ``step`` at ``at`` in ``attempt`` (a progress event of the log)."""
    facts.measured = facts.measured or measured
    if attempt is None:
        return
    _follow(facts, attempt)
    if facts.samples and step <= facts.samples[-1][0]:
        return  # the loss changed, not the step
    facts.samples = [*facts.samples[1 - RING:], [step, at]]
    facts.saved = [s for s in facts.saved if s >= facts.samples[0][0]]
    for saved in [s for s in facts.pending if _passed(facts, s)]:
        facts.pending.remove(saved)
        _time_save(facts, saved)


def note_checkpoint(facts: SaveFacts, attempt: int | None, step: int | None, at: float) -> None:
    """A complete checkpoint of ``step`` (None: unknown) was recorded at ``at``, in ``attempt``."""
    last = facts.last
    if last is not None and step is not None and last[1] == step:
        return  # the same checkpoint recorded again (a supervisor that re-attached)
    facts.checkpoints += 1
    if attempt is not None:
        facts.per_attempt += [0] * (attempt + 1 - len(facts.per_attempt))
        facts.per_attempt[attempt] += 1
    if last is not None:
        if step is not None and last[1] is not None and step > last[1]:
            facts.interval_steps = [*facts.interval_steps[1 - KEEP:], step - last[1]]
        if attempt is not None and last[0] == attempt and at > last[2]:
            facts.interval_s = [*facts.interval_s[1 - KEEP:], at - last[2]]
    facts.last = [attempt, step, at]
    if step is None or attempt is None:
        return
    _follow(facts, attempt)
    facts.saved = [*facts.saved[1 - 2 * RING:], step]
    if _passed(facts, step):
        _time_save(facts, step)
    else:
        facts.pending = [*facts.pending[1 - KEEP:], step]


def _follow(facts: SaveFacts, attempt: int) -> None:
    """The samples and saves kept are the latest attempt's."""
    if attempt != facts.attempt:
        facts.attempt, facts.samples, facts.saved, facts.pending = attempt, [], [], []


def _passed(facts: SaveFacts, step: int) -> bool:
    """Two progress samples past ``step``: the checkpoints saved before the first of them are
    recorded by then (the supervisor records a checkpoint at the look that sees it complete; the
    second sample is at least a progress interval, 5 s, later)."""
    return len(facts.samples) >= 2 and facts.samples[-2][0] > step


def _time_save(facts: SaveFacts, step: int) -> None:
    """The save of ``step``'s checkpoint timed from the gap between the last progress before that
    step and the first after it (whether the script saves after step N or before step N+1, the
    save is in it; a progress sample at a saved step is passed over), at the typical step time near
    it: the median seconds per step of the NEAR gaps nearest it that hold no save (at least
    MIN_CLEAN_GAPS). A gap that holds k saves (saves closer together than the progress events)
    gives k of them."""
    kept, clean = _clean_gaps(facts)
    at = next((i for i, s in enumerate(kept) if s[0] > step), None)
    if not at or len(clean) < MIN_CLEAN_GAPS:
        return
    (s1, t1), (s2, t2) = kept[at - 1], kept[at]
    near = sorted(clean, key=lambda gap: abs(gap[0] - at))[:NEAR]
    inside = sum(1 for s in facts.saved if s1 < s < s2)
    facts.gaps = [*facts.gaps[1 - KEEP:], [t2 - t1, s2 - s1, median(r for _, r in near), inside]]


def _clean_gaps(facts: SaveFacts) -> tuple[list[list[float]], list[tuple[int, float]]]:
    """The samples kept, less those at a saved step, and the gaps between them that hold no save:
    (the index of the gap's end in those samples, its seconds per step)."""
    saved = set(facts.saved)
    kept = [s for s in facts.samples if s[0] not in saved]
    clean = [(i, (b[1] - a[1]) / (b[0] - a[0]))
             for i, (a, b) in enumerate(zip(kept, kept[1:], strict=False), 1)
             if not any(a[0] < s < b[0] for s in saved)]
    return kept, clean


def median(values: Iterable[float]) -> float:
    ordered = sorted(values)  # no statistics import: status starts fast
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def restartable(failures: list[Failure]) -> int:
    """The failures whose lost work a save would have kept: not a bug that fails every attempt
    the same way (NOT_RETRYABLE), nor a straggler's node replaced at a checkpoint."""
    if not failures:
        return 0
    from fsdp_orch.vocab.categories import NOT_RETRYABLE, FailureCategory

    not_counted = NOT_RETRYABLE | {FailureCategory.STRAGGLER_REPLACED.value}
    return sum(1 for f in failures if f.category not in not_counted)


class Cost:
    """What one save held training up (no dataclass: ``status`` imports this and starts fast)."""

    __slots__ = ("error_s", "saves", "seconds", "source")

    def __init__(self, seconds: float, source: str, error_s: float | None, saves: int):
        self.seconds = seconds
        self.source = source  # "measured" or "step_gaps"
        self.error_s = error_s  # the step gaps' median's standard error (None: measured, or < 3)
        self.saves = saves  # the saves it is taken over


def save_cost(facts: SaveFacts, attempts: Iterable[AttemptRecord]) -> Cost | None:
    """What one save held training up: the runtime's measure where it gives one, else the step
    gaps' median estimate; None when neither is known."""
    if facts.measured:
        counted = [(r.checkpoint_s, facts.per_attempt[r.attempt]) for r in attempts
                   if r.attempt < len(facts.per_attempt) and facts.per_attempt[r.attempt]]
        saves = sum(n for _, n in counted)
        if saves:
            return Cost(sum(s for s, _ in counted) / saves, "measured", None, saves)
    if not facts.gaps:
        return None
    # each unclamped: the step times' noise goes both ways, and a median of estimates held at 0
    # would read a save shorter than that noise as none
    each = [(gap_s - steps * step_s) / saves for gap_s, steps, step_s, saves in facts.gaps]
    middle = median(each)
    # the standard error of a median, from the median absolute deviation: 1.4826 MAD is the
    # standard deviation of normal noise, and a median's error is 1.2533 sd / sqrt(n)
    error = (1.858 * median(abs(c - middle) for c in each) / len(each) ** 0.5
             if len(each) >= MIN_SAVES_TIMED else None)
    return Cost(max(0.0, middle), "step_gaps", error, sum(int(g[3]) for g in facts.gaps))


def resolved(cost: Cost) -> bool:
    """Whether the cost is known well enough to weigh: measured, or estimated from at least
    MIN_SAVES_TIMED saves to more than twice its standard error."""
    return cost.source == "measured" or (cost.error_s is not None
                                         and cost.seconds > 2 * cost.error_s)


def step_time(facts: SaveFacts) -> float | None:
    """The typical seconds per step: the median of those the timed saves were measured against,
    else of the latest attempt's gaps that hold no save; None without one."""
    if facts.gaps:
        return median(g[2] for g in facts.gaps)
    clean = _clean_gaps(facts)[1]
    return median(r for _, r in clean) if clean else None


def summarize(facts: SaveFacts, attempts: list[AttemptRecord], failures: list[Failure],
              until: float) -> dict[str, Any] | None:
    """``status --json``'s ``save_cadence`` (docs/reference/cli.md); None before any checkpoint."""
    if not facts.checkpoints:
        return None
    steps = round(median(facts.interval_steps)) if facts.interval_steps else None
    wall = median(facts.interval_s) if facts.interval_s else None
    cost = save_cost(facts, attempts)
    step_s = step_time(facts)
    if step_s is None and steps and wall is not None and cost is not None and wall > cost.seconds:
        step_s = (wall - cost.seconds) / steps  # saves closer together than the progress events
    failed = restartable(failures)
    exposure = sum(max(0.0, (until if r.ended_at is None else r.ended_at) - r.started_at)
                   for r in attempts)
    mtbf = exposure / failed if failed and exposure > 0 else None
    out: dict[str, Any] = {
        "checkpoints": facts.checkpoints, "interval_steps": steps, "interval_s": _r(wall),
        "step_s": _r(step_s, 4), "save_cost_s": _r(cost.seconds if cost else None),
        "save_cost_source": cost.source if cost else None,
        "save_cost_error_s": _r(cost.error_s if cost else None),
        "saves_timed": cost.saves if cost else 0,
        "failures": failed, "exposure_s": _r(exposure), "mtbf_s": _r(mtbf),
        "mtbf_observed": mtbf is not None}
    out.update(_advice(steps, wall, step_s, cost, mtbf))
    return out


def _advice(steps: int | None, wall: float | None, step_s: float | None, cost: Cost | None,
            mtbf: float | None) -> dict[str, Any]:
    """Young's interval at the failure rate seen, and what the current cadence and it lose."""
    advice: dict[str, Any] = dict.fromkeys(
        ("training_s_between_saves", "best_interval_s", "best_interval_steps", "lost_pct_now",
         "lost_pct_best", "lost_s_per_hour_now", "lost_s_per_hour_best", "verdict"))
    if steps is not None and step_s is not None:
        now = steps * step_s  # the training between two saves, the save left out
    elif wall is not None:
        now = wall - cost.seconds if cost is not None and wall > cost.seconds else wall
    else:
        return advice
    advice["training_s_between_saves"] = _r(now)
    if mtbf is None or cost is None or now <= 0 or not resolved(cost):
        return advice
    from fsdp_orch.vocab.save_interval import (
        expected_loss_fraction,
        interval_in_steps,
        young_seconds,
    )

    if step_s is not None and step_s > 0:
        best = interval_in_steps(cost.seconds, mtbf, step_s, min_steps=1, max_steps=MAX_STEPS)
        best_s, best_steps = best.seconds, best.steps
    else:
        best_s, best_steps = young_seconds(cost.seconds, mtbf), None
    if best_s <= 0:
        return advice
    lost_now = min(1.0, expected_loss_fraction(now, cost.seconds, mtbf))
    lost_best = min(1.0, expected_loss_fraction(best_s, cost.seconds, mtbf))
    worse = lost_now > RATIO * lost_best and lost_now - lost_best > FLOOR
    advice.update(
        best_interval_s=_r(best_s), best_interval_steps=best_steps,
        lost_pct_now=_r(100 * lost_now, 2), lost_pct_best=_r(100 * lost_best, 2),
        lost_s_per_hour_now=_r(3600 * lost_now, 1), lost_s_per_hour_best=_r(3600 * lost_best, 1),
        verdict=("about_right" if not worse else "too_sparse" if now > best_s else "too_dense"))
    return advice


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# --- what is said of it ------------------------------------------------------------------------

def describe(doc: dict[str, Any]) -> str:
    """The one line ``status ID`` prints, from ``save_cadence``."""
    every = _every(doc["interval_steps"], doc["interval_s"])
    cost = ("a save's cost is not known yet (no step times around a save)"
            if doc["save_cost_s"] is None else
            f"a save holds training {doc['save_cost_s']:.3g}s ({_source(doc)})")
    line = f"save cadence: {every}, {cost}"
    if not doc["mtbf_observed"]:
        return f"{line}; no failure in {_span(doc['exposure_s'])} of attempts: no advice yet"
    rate = (f"{doc['failures']} failure(s) in {_span(doc['exposure_s'])} "
            f"(one every {_span(doc['mtbf_s'])})")
    if doc["verdict"] is None:
        why = ("" if doc["save_cost_s"] is None else
               ": no advice while the save's cost is within its noise (fewer than "
               f"{MIN_SAVES_TIMED} saves timed, or under twice its error)")
        return f"{line}; {rate}{why}"
    best = _every(doc["best_interval_steps"], doc["best_interval_s"])
    return (f"{line}; {rate}: {doc['verdict'].replace('_', ' ')}, best {best}: loses "
            f"{doc['lost_pct_now']:.1f}% now, {doc['lost_pct_best']:.1f}% at best "
            f"({_span(doc['lost_s_per_hour_now'])} vs {_span(doc['lost_s_per_hour_best'])} "
            "an hour)")


def notice_message(doc: dict[str, Any] | None) -> str | None:
    """The notice's text when the cadence loses noticeably more than the best one, from
    NOTICE_FAILURES failures on; else None."""
    if doc is None or doc["verdict"] in (None, "about_right") or doc["failures"] < NOTICE_FAILURES:
        return None
    best = _every(doc["best_interval_steps"], doc["best_interval_s"])
    return (f"saving {_every(doc['interval_steps'], doc['interval_s'])} is "
            f"{doc['verdict'].replace('_', ' ')}: at the failure rate seen ({doc['failures']} in "
            f"{_span(doc['exposure_s'])}, one every {_span(doc['mtbf_s'])}) and "
            f"{doc['save_cost_s']:.3g}s a save ({_source(doc)}), it loses "
            f"{doc['lost_pct_now']:.1f}% of the time to saves and work done again; saving "
            f"{best} would lose {doc['lost_pct_best']:.1f}% "
            f"(sqrt(2 x save x time between failures), Young 1974)")


def tell(journal: Journal, status: JobStatus | None, attempt: int | None) -> bool:
    """The supervisor's one call, after a failure is recorded: the notice, once per job, when
    ``notice_message`` gives one for ``status`` (the job's events folded, ``journal.read_status``).
    True when it was written."""
    from fsdp_orch.record.event_types import SAVE_CADENCE

    if status is None or any(n.kind == SAVE_CADENCE for n in status.notices):
        return False
    message = notice_message(status.save_cadence_json())
    if message is None:
        return False
    journal.add_event(attempt=attempt, kind=SAVE_CADENCE, message=message)
    return True


def _every(steps: int | None, seconds: float | None) -> str:
    if steps is None:
        return "every ?" if seconds is None else f"every {_span(seconds)}"
    return f"every {steps} steps" + ("" if seconds is None else f" ({_span(seconds)})")


def _source(doc: dict[str, Any]) -> str:
    if doc["save_cost_source"] == "measured":
        return "measured by the runtime"
    error = doc["save_cost_error_s"]
    return ("estimated from the step gaps" if error is None
            else f"estimated from the step gaps, +-{error:.2g}s")


def _span(seconds: float | None) -> str:
    """42s, 7.5m, 3.2h: short, for a sentence."""
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.3g}s"
    if seconds < 7200:
        return f"{seconds / 60:.3g}m"
    return f"{seconds / 3600:.3g}h"


__all__ = ["FLOOR", "NOTICE_FAILURES", "RATIO", "SaveFacts", "describe",
           "note_checkpoint", "note_progress", "notice_message", "save_cost", "summarize",
           "tell"]
