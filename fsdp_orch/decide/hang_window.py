"""The hang window: how long a rank may make no progress before the hang rule judges it. Pure.

``watch.hang_detection: adaptive`` (the default) follows the job: once a rank has timed
``WARMUP_STEPS`` steps of its own (its heartbeat's ``step_s``, ``fsdp_orch.observe.step_times``),
the window is ``adaptive_multiplier`` x the 95th percentile of its recent step times, the slowest
rank's, clamped to ``[adaptive_min, heartbeat_timeout]``; before that (and with heartbeats that
carry no summary) it is ``heartbeat_timeout``, the ceiling. ``fixed`` is always
``heartbeat_timeout``. A step that is slow in Python (an evaluation), in a save that writes, in a
garbage collection or waiting on data loader workers that compute is not judged by the window at
all (the vetoes in ``watchdog.check_hang``): the window only has to cover a step's native calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fsdp_orch.jobspec.schema import Watch
from fsdp_orch.observe.heartbeats import Heartbeat

# steps timed by a rank before its summary counts: the first ones build caches, compile
WARMUP_STEPS = 5
PERCENTILE = "p95"  # of the summary's keys: the slow tail of ordinary steps, not a one-off


@dataclass(frozen=True)
class Window:
    seconds: float
    # "fixed", "warm-up" (adaptive, not enough steps timed yet: the ceiling) or "adaptive"
    mode: str
    step_s: float | None = None  # the step time it follows (adaptive)


def hang_window(watch: Watch, beats: dict[int, Heartbeat]) -> Window:
    """The window in force for ``beats``, the attempt's latest heartbeats."""
    ceiling = watch.heartbeat_timeout
    if watch.hang_detection == "fixed":
        return Window(ceiling, "fixed")
    step = slowest_step(beats)
    if step is None:
        return Window(ceiling, "warm-up")
    seconds = min(ceiling, max(watch.adaptive_min, watch.adaptive_multiplier * step))
    return Window(seconds, "adaptive", step)


def slowest_step(beats: dict[int, Heartbeat]) -> float | None:
    """The highest ``PERCENTILE`` step time among the ranks that have timed ``WARMUP_STEPS`` steps;
    None when none has (a summary that is missing or malformed counts as none)."""
    slowest: float | None = None
    for beat in beats.values():
        step = _tail(beat.step_s)
        if step is not None and (slowest is None or step > slowest):
            slowest = step
    return slowest


def _tail(summary: dict[str, Any] | None) -> float | None:
    if not summary:
        return None
    count, tail = summary.get("n"), summary.get(PERCENTILE)
    if not isinstance(count, int) or isinstance(count, bool) or count < WARMUP_STEPS:
        return None
    if not isinstance(tail, (int, float)) or isinstance(tail, bool):
        return None
    return float(tail) if math.isfinite(tail) and tail >= 0 else None


def moved(previous: Window | None, current: Window) -> bool:
    """Worth an event: the first window of an attempt, a new mode,
    or a move by more than a fifth."""
    return (previous is None or previous.mode != current.mode
            or abs(current.seconds - previous.seconds) > 0.2 * previous.seconds)


__all__ = ["PERCENTILE", "WARMUP_STEPS", "Window", "hang_window", "moved", "slowest_step"]
