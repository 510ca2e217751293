"""Whether a resume went wrong, and whose fault it is: the checkpoint it loaded (then *suspect*: the
next attempt resumes from the one before it), or the training (a loss gone NaN mid-run). Pure: the
caller passes the losses it read, the step resumed from and the loss logged when that checkpoint
was saved; no files, no clock.

A checkpoint is suspect when the attempt that resumed from it

- failed with an error while loading it, or crashed, before it was past the checkpoint
  (``blamed_crash``: no new complete checkpoint and at most ``CRASH_STEPS`` steps trained);
- showed a non-finite loss in its first ``FIRST_POINTS`` logged losses, or a non-finite grad norm
  in ``RESUMED_GRAD_RUN`` of them in a row (the Trainer's ``logging_nan_inf_filter`` logs a NaN
  loss as the mean of the losses before it, 0.0 right after a resume; its ``grad_norm`` stays NaN);
- logged first losses (the median of ``FIRST_POINTS``) far from the ones logged up to the
  checkpoint's step (``far_from``).

Past its first losses (and in a job that did not resume), a loss non-finite ``LOSS_RUN`` times in a
row, or a grad norm ``GRAD_RUN`` times, ends the attempt too: the weights are NaN from there on, and
every further save would rotate a good checkpoint out. One non-finite value alone is not a verdict:
an fp16 loss scaler's skipped step shows an infinite grad norm, once.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from fsdp_orch.vocab.categories import FailureCategory

FIRST_POINTS = 3  # the losses after a resume that speak for the checkpoint
CRASH_STEPS = 10  # a failure this close to the resumed step, with no new checkpoint, blames it
RESUMED_GRAD_RUN = 2  # non-finite grad norms in a row, among the first points, that blame it
LOSS_RUN = 2  # non-finite losses in a row that end an attempt past its first points
GRAD_RUN = 3  # ... and grad norms
REFERENCE_POINTS = 3  # the losses logged up to the saved step that make its reference
JUMP_RELATIVE = 0.5  # "far": more than half the reference away...
JUMP_SPREAD = 3.0  # ... and three times the spread of the reference points...
JUMP_ABSOLUTE = 0.1  # ... and this much at least
# Failures that a checkpoint can cause as it is loaded: a load error, a native crash, an exit with
# no cause found, a loss gone wrong. Not a traceback of the script's own code (the same code fails
# the same way from any checkpoint), a lost node, a hang or an injected fault.
BLAMABLE = frozenset({FailureCategory.CHECKPOINT_ERROR, FailureCategory.CRASHED_SIGNAL,
                      FailureCategory.UNKNOWN, FailureCategory.NONFINITE_LOSS,
                      FailureCategory.LOSS_JUMP})

NONFINITE = FailureCategory.NONFINITE_LOSS.value
JUMP = FailureCategory.LOSS_JUMP.value


@dataclass(frozen=True)
class Reference:
    """The loss logged when a checkpoint was saved: the median of the last few losses at or before
    its step, and their spread (max - min)."""

    step: int
    loss: float
    spread: float


@dataclass(frozen=True)
class Point:
    """One logged line: its step, and its loss and grad norm where it shows them."""

    step: int | None
    loss: float | None = None
    grad_norm: float | None = None


@dataclass(frozen=True)
class Verdict:
    """``category``: nonfinite_loss or loss_jump; ``suspect``: the resumed checkpoint is to blame
    (False: the loss went wrong mid-run)."""

    category: str
    suspect: bool
    evidence: str


def reference_at(points: dict[int, list[tuple[int, float]]], step: int) -> Reference | None:
    """The reference loss of the checkpoint of ``step``, from every attempt's logged (step, loss)
    points (``record.loss_points.read_points``): the latest attempt that logged a loss at or before
    ``step`` gives its last ``REFERENCE_POINTS`` such losses. None when no attempt logged one."""
    for attempt in sorted(points, reverse=True):
        before = [loss for s, loss in points[attempt] if s <= step and math.isfinite(loss)]
        if before:
            last = before[-REFERENCE_POINTS:]
            return Reference(step, statistics.median(last), max(last) - min(last))
    return None


def far_from(losses: Sequence[float], reference: Reference) -> bool:
    """The median of ``losses`` is far from ``reference``, either way (a loss back at its start,
    or the Trainer's 0.0 for a NaN it filtered)."""
    if not losses:
        return False
    gap = abs(statistics.median(losses) - reference.loss)
    return gap > max(JUMP_RELATIVE * abs(reference.loss), JUMP_SPREAD * reference.spread,
                     JUMP_ABSOLUTE)


def blamed_crash(category: str, resume_step: int | None, reached: int | None,
                 new_checkpoint: bool) -> bool:
    """A failure blames the checkpoint resumed from (``resume_step``; None: none was) when it is
    one a checkpoint can cause, the attempt completed no checkpoint of its own and trained at most
    ``CRASH_STEPS`` steps past it (``reached``: rank 0's highest step; None: no step seen)."""
    if resume_step is None or category not in BLAMABLE or new_checkpoint:
        return False
    return reached is None or reached <= resume_step + CRASH_STEPS


def _finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)


class LossJudge:
    """The losses of one attempt, fed in the order they were logged (``look``); the first verdict
    is returned once and kept (``verdict``). ``resume_step``: the step of the checkpoint the
    attempt resumed from (None: it started from scratch); ``reference``: that checkpoint's."""

    def __init__(self, resume_step: int | None, reference: Reference | None):
        self.resume_step = resume_step
        self.reference = reference
        self.first: list[float] = []  # the finite losses among the first points after the resume
        self.points = 0  # losses logged so far
        self.loss_run = 0  # non-finite losses in a row, as last looked
        self.grad_run = 0
        self.verdict: Verdict | None = None
        self.first_nonfinite: Point | None = None  # the first point with a non-finite value

    @property
    def early(self) -> bool:
        """Still among the first points after a resume: what goes wrong is the checkpoint's."""
        return self.resume_step is not None and self.points <= FIRST_POINTS

    def look(self, point: Point) -> Verdict | None:
        """The verdict this point brings, or None (also once a verdict was given)."""
        if self.verdict is not None:
            return None
        resumed = self.resume_step
        if point.step is not None and resumed is not None and point.step <= resumed:
            return None  # a line before the resumed step (a script that logs its start)
        if point.loss is not None:
            self.points += 1
        self.loss_run = self.loss_run + 1 if not _finite(point.loss) else (
            0 if point.loss is not None else self.loss_run)
        self.grad_run = self.grad_run + 1 if not _finite(point.grad_norm) else (
            0 if point.grad_norm is not None else self.grad_run)
        if self.first_nonfinite is None and (self.loss_run or self.grad_run):
            self.first_nonfinite = point
        self.verdict = self._judge(point)
        return self.verdict

    def _judge(self, point: Point) -> Verdict | None:
        at = f"at step {point.step}" if point.step is not None else "at its step"
        early = self.early
        resumed = f"the first {FIRST_POINTS} losses after the resume from step {self.resume_step}"
        if self.loss_run >= (1 if early else LOSS_RUN):
            return Verdict(NONFINITE, early, f"loss {point.loss} {at}" + (
                f", among {resumed}" if early else f", {self.loss_run} times in a row"))
        if self.grad_run >= (RESUMED_GRAD_RUN if early else GRAD_RUN):
            return Verdict(NONFINITE, early, f"grad norm {point.grad_norm} {at}, "
                                             f"{self.grad_run} times in a row" + (
                f", among {resumed}" if early else ""))
        if early and point.loss is not None and _finite(point.loss):
            self.first.append(point.loss)
            ref = self.reference
            if ref is not None and len(self.first) == FIRST_POINTS and far_from(self.first, ref):
                losses = ", ".join(f"{x:.4g}" for x in self.first)
                return Verdict(JUMP, True, (
                    f"loss {losses} {at} after the resume from step {self.resume_step}, against "
                    f"{ref.loss:.4g} logged at its save (spread {ref.spread:.3g})"))
        return None


__all__ = ["BLAMABLE", "CRASH_STEPS", "FIRST_POINTS", "GRAD_RUN", "JUMP", "LOSS_RUN", "LossJudge",
           "NONFINITE", "Point", "Reference", "Verdict", "blamed_crash", "far_from",
           "reference_at"]
