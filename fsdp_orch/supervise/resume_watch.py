"""The losses of a running attempt judged as they are logged (``checkpoints.suspect``): a NaN/inf
loss or grad norm, or first losses after a resume far from the one logged at its checkpoint's
save, stop the attempt; and a checkpoint the fsdp_orch runtime set aside because it would not load
(it restores an earlier one in the same attempt) is named.

It watches through the attempt's handle (``WatchedHandle``), as the attempt's watch reads it: the
log chunks and heartbeats it passes on are read here too, and a verdict stops the attempt at the
next poll. The supervisor's decision then names the verdict's category and evidence
(``verdict``). Each non-finite value and each verdict is a notice at once, so a job never ends
without one, whatever ends it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from fsdp_orch.backends.base import AttemptHandle
from fsdp_orch.checkpoints.suspect import NONFINITE, LossJudge, Point, Reference, Verdict
from fsdp_orch.observe.console_health import parse_grad_norm, runtime_set_aside
from fsdp_orch.observe.console_loss import parse_loss, printed_step, rank_segments
from fsdp_orch.observe.file_tail import LogChunk
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.record.journal import Journal
from fsdp_orch.supervise.logfollow import nearness_to_rank_0
from fsdp_orch.vocab.states import HeartbeatState

STOP_GRACE_S = 5.0
STOPPED_EXIT = -15  # what poll says of an attempt stopped on a verdict that exited 0 all the same


class AttemptLosses:
    """One attempt's logged losses and grad norms (rank 0's, from the log nearest it), judged in
    order. ``set_aside_by_runtime``: told (the tracker's) of each checkpoint the runtime set aside
    as it would not load: (path, why, where it went)."""

    def __init__(self, journal: Journal, attempt: int, judge: LossJudge,
                 set_aside_by_runtime: Callable[[str, str, str], object]):
        self.journal = journal
        self.attempt = attempt
        self.judge = judge
        self.set_aside_by_runtime = set_aside_by_runtime
        self._carry: dict[str, str] = {}
        self._nearest = 3  # how near rank 0 the log that gave the losses so far is (0: its own)
        self._printed = False  # a loss was read from the console: the heartbeat's is not used
        self._step_now: int | None = None  # rank 0's step at the last look
        self._beat_step: int | None = None  # the step of the heartbeat loss last judged
        self._told: set[str] = set()  # checkpoints the runtime set aside (each read in two logs)
        self._noted = False  # the first non-finite value was told
        # the last point judged and the log it came from: the same line read in a second log (the
        # console and rank 0's own file, while the nearest is not known yet) is judged once
        self._last: tuple[str, Point] | None = None

    @property
    def verdict(self) -> Verdict | None:
        return self.judge.verdict

    def read(self, chunks: list[LogChunk]) -> None:
        for source, data in sorted(chunks, key=lambda chunk: nearness_to_rank_0(chunk[0], None)):
            text = self._carry.pop(source, "") + data.decode("utf-8", errors="replace")
            lines = text.split("\n")
            if lines[-1]:
                self._carry[source] = lines[-1][-16_384:]
            for line in lines[:-1]:
                self._line(source, line)

    def _line(self, source: str, line: str) -> None:
        for rank, text in rank_segments(line) if "[default" in line else [(None, line)]:
            moved = runtime_set_aside(text)
            if moved is not None:
                if moved[0] not in self._told:
                    self._told.add(moved[0])
                    self.set_aside_by_runtime(*moved)
                continue
            loss, grad_norm = parse_loss(text), parse_grad_norm(text)
            if loss is None and grad_norm is None:
                continue
            nearness = nearness_to_rank_0(source, rank)
            if nearness > self._nearest:
                continue
            self._nearest, self._printed = nearness, self._printed or loss is not None
            step = printed_step(text)
            point = Point(step if step is not None else self._step_now,
                          None if loss is None else loss[0], grad_norm)
            if self._last is not None and self._last[0] != source and _same(self._last[1], point):
                continue
            self._last = (source, point)
            self._look(point, "console")

    def beats(self, beats: dict[int, Heartbeat]) -> None:
        """Rank 0's step, for lines that name none; the runtime's loss in its heartbeat, for a
        script that prints none."""
        lead = beats.get(0)
        if lead is None or lead.state == HeartbeatState.STARTING:
            return
        self._step_now = lead.step
        if not self._printed and lead.loss is not None and lead.step != self._beat_step:
            self._beat_step = lead.step
            self._look(Point(lead.step, float(lead.loss)), "heartbeat")

    def _look(self, point: Point, where: str) -> None:
        verdict = self.judge.look(point)
        if verdict is not None:
            then = ("the checkpoint it resumed from is suspect: the attempt is stopped, and the "
                    "next resumes from the one before it") if verdict.suspect else (
                "the attempt is stopped; the next resumes from the latest complete checkpoint")
            self.journal.add_event(attempt=self.attempt, kind=verdict.category,
                                   message=f"{verdict.evidence} (rank 0's {where}): {then}")
        elif self.judge.first_nonfinite is point and not self._noted:
            values = ", ".join(f"{name} {value}" for name, value in
                               (("loss", point.loss), ("grad norm", point.grad_norm))
                               if value is not None)
            self.journal.add_event(attempt=self.attempt, kind=NONFINITE, message=(
                f"{values} at step {point.step} (rank 0's {where}): not NaN/inf again yet, so "
                "training goes on (an fp16 loss scaler's skipped step shows one such value)"))
        self._noted = self._noted or self.judge.first_nonfinite is not None


def _same(a: Point, b: Point) -> bool:
    """Equal points, NaN equal to NaN."""
    return all(x == y or (x != x and y != y) for x, y in zip(
        (a.step, a.loss, a.grad_norm), (b.step, b.loss, b.grad_norm), strict=True))


class WatchedHandle:
    """An attempt's handle, passing everything on, that also feeds what the attempt's watch reads
    (log chunks, heartbeats) to ``losses``, and stops the attempt at the poll after a verdict, then
    tells ``stopped`` (before the watch sees the exit: what it saved from a suspect checkpoint's
    weights must not pass for the job's last checkpoint)."""

    def __init__(self, inner: AttemptHandle, losses: AttemptLosses,
                 stopped: Callable[[Verdict], object]):
        self.inner = inner
        self.losses = losses
        self.stopped = stopped
        self._stopped = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def log_chunks(self) -> list[LogChunk]:
        chunks = self.inner.log_chunks()
        self.losses.read(chunks)
        return chunks

    def heartbeats(self) -> dict[int, Heartbeat]:
        beats = self.inner.heartbeats()
        self.losses.beats(beats)
        return beats

    def poll(self) -> int | None:
        verdict = self.losses.verdict
        if verdict is not None and not self._stopped:
            self._stopped = True
            self.inner.stop(STOP_GRACE_S)
            self.stopped(verdict)
        code = self.inner.poll()
        return STOPPED_EXIT if self._stopped and code == 0 else code

    def close(self) -> None:
        self.inner.close()


def watched(handle: AttemptHandle, journal: Journal, attempt: int, resume_step: int | None,
            reference: Reference | None, set_aside_by_runtime: Callable[[str, str, str], object],
            stopped: Callable[[Verdict], object]) -> tuple[AttemptHandle, AttemptLosses]:
    """``handle`` watched for the losses of ``attempt`` (resumed from ``resume_step``, whose
    checkpoint logged ``reference``), and what is judged of them."""
    losses = AttemptLosses(journal, attempt, LossJudge(resume_step, reference),
                           set_aside_by_runtime)
    return cast(AttemptHandle, WatchedHandle(handle, losses, stopped)), losses


__all__ = ["AttemptLosses", "STOPPED_EXIT", "WatchedHandle", "watched"]
