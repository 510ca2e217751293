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
NCCL collective spins a core, and its CPU time would hide the hang. In any process, the CPU time
of its child processes counts the same way (:class:`ChildrenCpu`). Stdlib only.
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


def fraction_at_load(load: float, cpus: int, base: float = MIN_CORE_FRACTION) -> float:
    """``base``, or half the share of a core that one busy process gets at this load average, when
    that is less: on a machine with more runnable processes than cores a busy process gets less than
    a core (on 2 cores at load 13, about 0.15), and data loader workers that are loading must
    still count. An idle hung rank's workers use next to none at any load."""
    cpus = max(cpus, 1)
    share = cpus / max(load, cpus)
    return min(base, share / 2)


def fraction_at_this_load() -> float:
    import os

    try:
        load = os.getloadavg()[0]
    except OSError:
        return MIN_CORE_FRACTION
    return fraction_at_load(load, os.cpu_count() or 1)


def xla_imported() -> bool:
    return "torch_xla" in sys.modules


class ComputeMeter:
    """``compute_at``: when the process last used ``min_fraction`` of a core between two samples,
    counted only while ``applies()`` (torch_xla is imported)."""

    def __init__(self, clock: Callable[[], float] = time.time,
                 cpu_seconds: Callable[[], float] = time.process_time,
                 wall: Callable[[], float] = time.monotonic,
                 applies: Callable[[], bool] = xla_imported,
                 min_fraction: float | Callable[[], float] = MIN_CORE_FRACTION):
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
        least = self._min_fraction() if callable(self._min_fraction) else self._min_fraction
        if (now[1] - last[1]) / elapsed >= least:
            self.compute_at = self._clock()


class ChildrenCpu:
    """The CPU seconds this process's child processes used since it was made, as a total that only
    grows (a child that exits keeps what it counted). Data loader workers refilling their queues
    (at an epoch's start they are made anew, and may load for seconds) keep the main thread waiting
    in one native call like a hang does, while a hung rank's workers sit idle once their prefetch
    queue is full. Linux ``/proc``; elsewhere always 0."""

    def __init__(self, pid: int | None = None):
        import os

        self._pid = os.getpid() if pid is None else pid
        self._by_task = os.path.exists(f"/proc/{self._pid}/task/{self._pid}/children")
        self._tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        # children already there: from what they used so far
        self._seen: dict[int, float] = self._now()
        self._total = 0.0

    def __call__(self) -> float:
        now = self._now()
        for child, cpu in now.items():
            self._total += max(0.0, cpu - self._seen.get(child, 0.0))
        self._seen = now
        return self._total

    def _now(self) -> dict[int, float]:
        return {child: cpu for child in self._children() if (cpu := self._cpu(child)) is not None}

    def _children(self) -> list[int]:
        import os

        found: list[int] = []
        try:
            if self._by_task:
                for task in os.listdir(f"/proc/{self._pid}/task"):
                    with open(f"/proc/{self._pid}/task/{task}/children") as f:
                        found.extend(int(pid) for pid in f.read().split())
                return found
            # kernels without the children file: every process's parent
            for name in os.listdir("/proc"):
                if name.isdigit() and self._parent(name) == self._pid:
                    found.append(int(name))
        except (OSError, ValueError):
            pass
        return found

    @staticmethod
    def _parent(pid: str) -> int | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def _cpu(self, pid: int) -> float | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            return (int(fields[11]) + int(fields[12])) / self._tick  # utime, stime after the name
        except (OSError, ValueError, IndexError):
            return None


__all__ = ["MIN_CORE_FRACTION", "ChildrenCpu", "ComputeMeter", "xla_imported"]
