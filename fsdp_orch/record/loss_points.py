"""Every training loss a job logged, for its report's loss curve: ``losses.jsonl`` in the run
folder (0600), a line per point, ``{"attempt": 0, "step": 120, "loss": 2.31, "source": "print"}``.

The event log keeps one progress event per 5 s (``supervise.progress_events``): a 200-step demo
drew 4 points where its console printed 20. The supervisor appends here what it read: each loss
the script printed (the console reader's, with the step its line names, else rank 0's step when it
was read) and, for the runtime's heartbeats, each new (step, loss) it saw. Appended in batches
(at most one write per ``FLUSH_EVERY_S``: the run folder may be on a shared filesystem), and
thinned past ``POINTS_KEPT`` points an attempt (every second point kept, then every fourth...), so
a run of a million steps stays a few MB.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable

from fsdp_orch.places.private import open_private
from fsdp_orch.record.event_types import RUNTIME_LOSS

LOSS_FILE = "losses.jsonl"
FLUSH_EVERY_S = 5.0
POINTS_KEPT = 20_000  # an attempt's points written at each thinning level before it doubles


class LossLog:
    """One per supervisor; ``point`` for each loss seen, ``flush`` at the loop's pace."""

    def __init__(self, run_dir: str | None, clock: Callable[[], float]):
        self.path = None if run_dir is None else os.path.join(run_dir, LOSS_FILE)
        self.clock = clock
        self._pending: list[str] = []
        self._flushed_at = clock()
        self._seen: dict[int, int] = {}  # attempt -> points offered
        self._last: tuple[int, int, float] | None = None  # (attempt, step, loss) last kept

    def point(self, attempt: int, step: int, loss: float | None, source: str) -> None:
        """A loss seen at ``step``; the same (step, loss) twice in a row is one point."""
        if self.path is None or loss is None or not math.isfinite(loss):
            return
        if self._last == (attempt, step, loss):
            return
        self._last = (attempt, step, loss)
        seen = self._seen.get(attempt, 0)
        self._seen[attempt] = seen + 1
        if _kept(seen):
            self._pending.append(json.dumps({"attempt": attempt, "step": step, "loss": loss,
                                             "source": source}))

    def flush(self, final: bool = False) -> None:
        """Append what is pending, at most every FLUSH_EVERY_S unless ``final``; a failed write
        only costs the report points."""
        if not self._pending or (not final and self.clock() - self._flushed_at < FLUSH_EVERY_S):
            return
        lines, self._pending = self._pending, []
        self._flushed_at = self.clock()
        assert self.path is not None
        try:
            with os.fdopen(open_private(self.path, os.O_WRONLY | os.O_APPEND), "a") as f:
                f.write("\n".join(lines) + "\n")
        except OSError:
            pass


def _kept(seen: int) -> bool:
    """Whether the point offered after ``seen`` others is written: each of the first POINTS_KEPT,
    then every second of the next 2*POINTS_KEPT, every fourth of the next 4*POINTS_KEPT..."""
    every = 1
    while seen >= POINTS_KEPT * every:
        seen -= POINTS_KEPT * every
        every *= 2
    return seen % every == 0


def read_points(run_dir: str) -> dict[int, list[tuple[int, float]]]:
    """Attempt -> (step, loss) in the order logged: the printed ones where the attempt printed
    any, else the runtime's heartbeat samples. A torn or odd line is skipped; no file: {}."""
    printed: dict[int, list[tuple[int, float]]] = {}
    sampled: dict[int, list[tuple[int, float]]] = {}
    try:
        with open(os.path.join(run_dir, LOSS_FILE), encoding="utf-8") as f:
            lines = f.readlines()
    except OSError:
        return {}
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        attempt, step, loss = data.get("attempt"), data.get("step"), data.get("loss")
        if (type(attempt) is int and type(step) is int and isinstance(loss, (int, float))
                and not isinstance(loss, bool) and math.isfinite(loss)):
            kept = sampled if data.get("source") == RUNTIME_LOSS else printed
            kept.setdefault(attempt, []).append((step, float(loss)))
    return {attempt: printed.get(attempt) or sampled[attempt]
            for attempt in sorted(set(printed) | set(sampled))}


__all__ = ["FLUSH_EVERY_S", "LOSS_FILE", "POINTS_KEPT", "LossLog", "read_points"]
