"""When the runtime saves: every ``checkpoint.interval`` steps, or, with ``interval: auto``, every
Young's interval (:mod:`fsdp_orch.vocab.save_interval`) from the attempt's measured step time and
blocking save cost and the job's time between failures (the one the supervisor observed, else
``checkpoint.auto_mtbf``). Torch-free: the checkpointer agrees the measurements between the ranks
(every rank must save at the same step) and hands them in.

The first save of an attempt under ``auto`` comes ``AUTO_FIRST_SAVE_STEPS`` steps after its start
(no save cost is known before one is measured); each save after it chooses again, and a choice
that differs from the one in force by more than ``AUTO_CHANGE`` replaces it.
"""

from __future__ import annotations

import statistics
from collections import deque

from fsdp_orch.vocab.save_interval import (
    AUTO_COST_SAMPLES,
    AUTO_FIRST_SAVE_STEPS,
    DEFAULT_AUTO_MTBF_S,
    SaveInterval,
    auto_interval,
    worth_changing,
)

STEP_SAMPLES = 50  # the step time: the median of the last this many steps


class SaveSchedule:
    """The interval in force; for ``auto``, the measurements it is chosen from."""

    def __init__(self, interval: int | str, *, mtbf_s: float = DEFAULT_AUTO_MTBF_S,
                 observed: bool = False):
        """``interval``: steps, or ``"auto"``; ``mtbf_s``: the time between failures to choose
        with, ``observed`` when it is the job's own (else the assumed ``auto_mtbf``)."""
        if interval != "auto" and (not isinstance(interval, int) or interval < 1):
            raise ValueError(f"expected a number of steps above 0 or 'auto', got {interval!r}")
        self.auto = interval == "auto"
        self.steps = AUTO_FIRST_SAVE_STEPS if self.auto else int(interval)
        self.mtbf_s = mtbf_s
        self.observed = observed
        self.chosen: SaveInterval | None = None  # auto's choice in force (None: the first save's)
        self.step_times: deque[float] = deque(maxlen=STEP_SAMPLES)
        self.costs: deque[float] = deque(maxlen=AUTO_COST_SAMPLES)
        self._last: tuple[int, float] | None = None  # (step, when its step call ended)

    def due(self, step: int, last_saved: int | None) -> bool:
        """Whether ``step`` is one to save at. A fixed interval: its multiples. ``auto``: ``steps``
        after the last save (or the restored checkpoint), else after the attempt's start."""
        if step <= 0 or step == last_saved:
            return False
        if not self.auto:
            return step % self.steps == 0
        return step - (last_saved or 0) >= self.steps

    def stepped(self, step: int, now: float) -> None:
        """The step call of ``step`` begins at ``now`` (a monotonic clock): the time since the
        previous one ended is a step time (a save's blocking is left out, see :meth:`rested`)."""
        if self._last is not None and step == self._last[0] + 1 and now > self._last[1]:
            self.step_times.append(now - self._last[1])
        self._last = (step, now)

    def rested(self, step: int, now: float) -> None:
        """The step call of ``step`` (and any save in it) ended at ``now``."""
        self._last = (step, now)

    def saved(self, block_s: float) -> None:
        """A save held training up for ``block_s`` seconds (waiting for the one before included)."""
        self.costs.append(block_s)

    def measured(self) -> tuple[float, float]:
        """(save cost, step time) of this rank, to agree between the ranks: the median of the last
        saves' blocking seconds and of the last steps' times (0.0: none measured yet)."""
        cost = statistics.median(self.costs) if self.costs else 0.0
        step_s = statistics.median(self.step_times) if self.step_times else 0.0
        return cost, step_s

    def choose(self, save_cost_s: float, step_s: float) -> SaveInterval | None:
        """Choose from the agreed measurements; the new choice when it replaces the one in force,
        else None. Nothing is chosen before a step time is known."""
        if not self.auto or step_s <= 0:
            return None
        proposed = auto_interval(save_cost_s, self.mtbf_s, step_s, observed=self.observed)
        if not worth_changing(self.chosen.steps if self.chosen else None, proposed.steps):
            return None
        self.chosen = proposed
        self.steps = proposed.steps
        return proposed


__all__ = ["STEP_SAMPLES", "SaveSchedule"]
