"""A rank's own step times, summarised for its heartbeat. Stdlib only (it runs in every rank).

Each rank times its steps from its own step hook (the bootstrap's optimizer-step hook, or the
runtime's reports): the seconds between two consecutive steps, whatever the step did (forward,
backward, data loading, a log line), except a gap that held a checkpoint save the runtime reported
(state ``saving``). It keeps the last ``RECENT`` of them and sends

    "step_s": {"n": STEPS_TIMED, "p50": SECONDS, "p95": SECONDS, "max": SECONDS}

in its heartbeat (milliseconds, over the recent steps; ``n`` counts every step timed in the
attempt): about 50 bytes, which cross the wire only when the rank's heartbeat changes anyway (it
steps). The supervisor turns the ranks' summaries into the hang window
(``fsdp_orch.decide.hang_window``).
"""

from __future__ import annotations

RECENT = 64  # steps: a high percentile of 64 follows a change of pace within a minute at 1 step/s


class StepTimes:
    """The durations between consecutive steps of one rank, the last ``RECENT`` of them."""

    def __init__(self, recent: int = RECENT):
        self._recent: list[float] = []
        self._size = recent
        self._next = 0  # where the next duration goes once the ring is full
        self._last_at: float | None = None
        self.count = 0

    def step_at(self, now: float) -> None:
        """A step ended at ``now``: time it from the previous one."""
        if self._last_at is not None and now > self._last_at:
            duration = now - self._last_at
            if len(self._recent) < self._size:
                self._recent.append(duration)
            else:
                self._recent[self._next] = duration
                self._next = (self._next + 1) % self._size
            self.count += 1
        self._last_at = now

    def saving(self) -> None:
        """A checkpoint save began after the last step: the gap to the next step is the save's, not
        a step's. It is not timed (a save is judged by its own rule: a rank inside one is late only
        when it writes nothing within the window), so a job that saves often keeps a window cut to
        its steps."""
        self._last_at = None

    def summary(self) -> dict[str, float | int] | None:
        """``{"n", "p50", "p95", "max"}`` for the heartbeat; None before two steps."""
        if not self._recent:
            return None
        ordered = sorted(self._recent)
        return {"n": self.count, "p50": _ms(percentile(ordered, 0.50)),
                "p95": _ms(percentile(ordered, 0.95)), "max": _ms(ordered[-1])}


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of a sorted, non-empty list: a duration that was observed."""
    index = min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))
    return ordered[index]


def _ms(seconds: float) -> float:
    return round(seconds, 3)


__all__ = ["RECENT", "StepTimes", "percentile"]
