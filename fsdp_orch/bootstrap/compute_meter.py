"""Is this XLA process computing? The CPU time it used, sampled by the agent's watcher thread.

On XLA a step's graph is compiled the first time it is seen: ``torch_xla.sync()`` (or reading a
tensor) then stays in one native call for as long as the compiler takes, seconds on this machine
and minutes for a large model on a TPU host, without Python running, a step finishing or a byte
written. Measured here: the demo's second step, whose graph first includes the optimizer's state,
held the main thread in ``sync`` for over 8 s, and the hang rule alone called it a hang. The
compiler keeps the host's CPU busy; a host waiting for its peers inside the compiled graph's
collectives, or stuck in a sleep, uses next to none.

So on XLA CPU time is progress: ``compute_at`` is the last sample in which the process used at
least ``min_fraction`` of a core. Only where torch_xla is imported: on CUDA, a rank waiting in an
NCCL collective spins a core, and its CPU time would hide the hang. Stdlib only.
"""

from __future__ import annotations

import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# A quarter of a core over a sample: the watcher thread's own work and an idle runtime's threads
# stay far below it, a compiler (one or more busy threads) far above.
MIN_CORE_FRACTION = 0.25


def xla_imported() -> bool:
    return "torch_xla" in sys.modules


class ComputeMeter:
    """``compute_at``: when the process last used ``min_fraction`` of a core between two samples,
    counted only while ``applies()`` (torch_xla is imported)."""

    def __init__(self, clock: Callable[[], float] = time.time,
                 cpu_seconds: Callable[[], float] = time.process_time,
                 wall: Callable[[], float] = time.monotonic,
                 applies: Callable[[], bool] = xla_imported,
                 min_fraction: float = MIN_CORE_FRACTION):
        self._clock = clock
        self._cpu = cpu_seconds
        self._wall = wall
        self._applies = applies
        self._min_fraction = min_fraction
        self._last = (wall(), cpu_seconds())
        self.compute_at: float | None = None

    def sample(self) -> None:
        now = (self._wall(), self._cpu())
        last, self._last = self._last, now
        elapsed = now[0] - last[0]
        if elapsed <= 0 or not self._applies():
            return
        if (now[1] - last[1]) / elapsed >= self._min_fraction:
            self.compute_at = self._clock()


__all__ = ["MIN_CORE_FRACTION", "ComputeMeter", "xla_imported"]
