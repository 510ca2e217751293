"""Where a job's wall time went: the facts the fold keeps of each attempt (``AttemptRecord``) split
the time from submission to the end (or to the time asked about) into buckets that add up to it
exactly. Pure: no clock, no files; ``record.fold`` gathers the facts,
``JobStatus`` shows the result.

The buckets, in the order a job lives through them:
- ``queue``: submission to the first attempt's start, and a requeued allocation's wait;
- ``startup``: an attempt's start to its first step (launching, imports, process group, loading);
- ``productive``: first step to last step of an attempt, less the steps trained again;
- ``checkpoint``: within the first to last step, the seconds the runtime's checkpoint saves held
  training up (rank 0's own measure, carried by its heartbeat; 0 for a script that saves by itself);
- ``lost_work``: steps an attempt trained again after resuming from an older checkpoint than an
  earlier attempt had reached, at that attempt's own step time;
- ``detection``: an attempt's last step to the supervisor's verdict (a hang's stall, a crash seen);
- ``teardown``: the verdict (or the last step) to the attempt's end, and the last attempt's end
  to the job's;
- ``restart``: an attempt's end to the next one's start (the backoff included);
- ``unaccounted``: what no fact covers (an attempt whose end the log never says).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fsdp_orch.vocab.times import iso_time

PRODUCTIVE = "productive"
# an attempt's first to last step, before its split into productive and lost work
TRAINING = "training"
BUCKETS = ("productive", "queue", "startup", "checkpoint", "detection", "restart", "lost_work",
           "teardown", "unaccounted")
BADPUT = BUCKETS[1:]


@dataclass
class AttemptRecord:
    """One attempt as its events tell it: when it started, first stepped, last stepped, was judged
    failed and ended, and the steps it resumed from and reached."""

    attempt: int
    started_at: float
    resume_from: str | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    first_step_at: float | None = None
    resume_step: int | None = None  # the checkpoint's step it resumed from (None: unknown or none)
    first_progress_step: int | None = None  # rank 0's step in the attempt's first progress event
    last_step: int | None = None
    last_step_at: float | None = None
    verdict_at: float | None = None  # its first failure's verdict
    stalled_for_s: float | None = None  # that verdict's stall (a hang): last step = verdict - stall
    requeued: bool = False  # the allocation was requeued after it: the wait for the next is queue
    checkpoint_s: float = 0.0  # seconds its checkpoint saves held training up, to its last progress


@dataclass(frozen=True)
class Span:
    start: float
    end: float
    bucket: str
    attempt: int | None = None


@dataclass(frozen=True)
class Goodput:
    """The breakdown of ``started_at`` .. ``until``: spans in time order, seconds per bucket."""

    started_at: float
    until: float
    spans: tuple[Span, ...]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return self.until - self.started_at

    @property
    def goodput_pct(self) -> float | None:
        return None if self.wall_s <= 0 else 100.0 * self.seconds[PRODUCTIVE] / self.wall_s

    def largest_loss(self) -> tuple[str, float] | None:
        """The badput bucket with the most seconds; None when there is none."""
        name = max(BADPUT, key=lambda b: self.seconds[b])
        return (name, self.seconds[name]) if self.seconds[name] > 0 else None

    def to_json(self, running: bool) -> dict[str, Any]:
        wall = self.wall_s
        loss = self.largest_loss()
        pct = self.goodput_pct
        return {"wall_s": round(wall, 3), "goodput_pct": None if pct is None else round(pct, 2),
                "until": iso_time(self.until), "running": running,
                "seconds": {b: round(self.seconds[b], 3) for b in BUCKETS},
                "percent": {b: round(100.0 * self.seconds[b] / wall, 2) if wall > 0 else 0.0
                            for b in BUCKETS},
                "largest_loss": (None if loss is None
                                 else {"bucket": loss[0], "seconds": round(loss[1], 3)})}


def account(created_at: float, attempts: list[AttemptRecord], until: float,
            job_ended: bool) -> Goodput:
    """The breakdown of ``created_at`` .. ``until`` (the job's end, or the time asked about while it
    runs). Each fact opens a bucket that lasts to the next fact; facts out of order (another host's
    clock) are moved up to the one before, so the spans tile the
    wall time and their sum is exact."""
    marks: list[tuple[float, str, int | None]] = [(created_at, "queue", None)]
    ordered = sorted(attempts, key=lambda r: r.attempt)
    for record in ordered:
        marks += _attempt_marks(record)
    if job_ended and ordered:
        last = ordered[-1]
        if last.ended_at is None:  # the log never says how the attempt ended
            known = max(t for t in (last.started_at, last.first_step_at, last.last_step_at,
                                    last.verdict_at)
                        if t is not None)
            marks.append((known, "unaccounted", last.attempt))
        elif marks[-1][1] == "restart":
            marks[-1] = (marks[-1][0], "teardown", last.attempt)
    spans = _tile(marks, until)
    spans = _split_training(spans, ordered)
    seconds = dict.fromkeys(BUCKETS, 0.0)
    for span in spans:
        seconds[span.bucket] += span.end - span.start
    # The spans tile the wall time; the sum of their lengths can still differ from it in the last
    # bits of a float: that difference is put where nothing else is, so the sum is the wall time.
    seconds["unaccounted"] += (until - created_at) - sum(seconds.values())
    return Goodput(created_at, until, tuple(spans), seconds)


def _attempt_marks(record: AttemptRecord) -> list[tuple[float, str, int | None]]:
    a = record.attempt
    marks: list[tuple[float, str, int | None]] = [(record.started_at, "startup", a)]
    stepped = record.first_step_at is not None
    if stepped:
        marks.append((record.first_step_at, TRAINING, a))  # type: ignore[arg-type]
    last_step_at = record.last_step_at if record.last_step_at is not None else record.first_step_at
    if record.verdict_at is not None:
        if stepped:
            stop = (record.verdict_at - record.stalled_for_s if record.stalled_for_s is not None
                    else last_step_at)
            marks.append((stop, "detection", a))  # type: ignore[arg-type]
        marks.append((record.verdict_at, "teardown", a))
    elif record.ended_at is not None and stepped:
        marks.append((last_step_at, "teardown", a))  # type: ignore[arg-type]
    if record.ended_at is not None:
        marks.append((record.ended_at, "queue" if record.requeued else "restart", a))
    return marks


def _tile(marks: list[tuple[float, str, int | None]], until: float) -> list[Span]:
    """Consecutive spans from each mark to the next (the last to ``until``), each mark held no
    earlier than the one before and no later than ``until``; empty spans left out."""
    spans = []
    at = min(marks[0][0], until)
    for i, (_, bucket, attempt) in enumerate(marks):
        end = until if i + 1 == len(marks) else min(max(marks[i + 1][0], at), until)
        if end > at:
            spans.append(Span(at, end, bucket, attempt))
        at = end
    return spans


def _split_training(spans: list[Span], attempts: list[AttemptRecord]) -> list[Span]:
    """Each attempt's training span as lost work (the steps it trained again), blocking checkpoint
    time and productive, drawn in that order (the totals are measured; where in the span the saves
    and the steps trained again fell is not)."""
    by_attempt = {r.attempt: r for r in attempts}
    out = []
    for span in spans:
        if span.bucket != TRAINING:
            out.append(span)
            continue
        record = by_attempt[span.attempt]  # type: ignore[index]
        earlier = [r.last_step for r in attempts
                   if r.attempt < record.attempt and r.last_step is not None]
        lost = lost_seconds(record, max(earlier, default=None), span.end - span.start)
        saving = min(record.checkpoint_s, span.end - span.start - lost)
        at = span.start
        for bucket, seconds in (("lost_work", lost), ("checkpoint", saving)):
            if seconds > 0:
                out.append(Span(at, at + seconds, bucket, span.attempt))
                at += seconds
        if at < span.end:
            out.append(Span(at, span.end, PRODUCTIVE, span.attempt))
    return out


def lost_seconds(record: AttemptRecord, reached: int | None, trained_s: float) -> float:
    """Seconds of ``record``'s ``trained_s`` spent on steps an earlier attempt had already reached
    (``reached``: the highest step of the attempts before it): the steps from its resume point up
    to ``reached``, at its own seconds per step."""
    if reached is None or record.first_progress_step is None or record.last_step is None:
        return 0.0
    if record.resume_step is not None:
        resumed = record.resume_step
    elif record.resume_from is None:
        resumed = 0  # a start from scratch
    else:
        resumed = record.first_progress_step - 1  # a checkpoint whose step is unknown
    again = min(reached, record.last_step) - resumed
    if again <= 0:
        return 0.0
    if record.last_step <= reached:
        return trained_s  # it never got past where an earlier attempt had been
    step_s = trained_s / max(1, record.last_step - record.first_progress_step)
    return min(trained_s, again * step_s)


__all__ = ["BADPUT", "BUCKETS", "PRODUCTIVE", "AttemptRecord", "Goodput", "Span", "account",
           "lost_seconds"]
