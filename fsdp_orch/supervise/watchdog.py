"""Hang detection from heartbeats. Pure: the caller passes the heartbeats and the time."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from fsdp_orch.heartbeats import Heartbeat
from fsdp_orch.spec import Watch

MIN_SAMPLES_FOR_ADAPTIVE = 5


@dataclass(frozen=True)
class HangVerdict:
    stalled_for_s: float  # since the attempt's last progress of any rank
    ranks: list[int]  # ranks past their window
    evidence: str


@dataclass
class StepClock:
    """Observed seconds per step (from rank heartbeats), for the adaptive mode."""

    samples: list[float] = field(default_factory=list)
    _last: tuple[int, float] | None = None

    def observe(self, beat: Heartbeat) -> None:
        if beat.state != "training":
            return
        if self._last is not None and beat.step > self._last[0]:
            per_step = (beat.time - self._last[1]) / (beat.step - self._last[0])
            if per_step > 0:
                self.samples = [*self.samples[-99:], per_step]
        if self._last is None or beat.step != self._last[0]:
            self._last = (beat.step, beat.time)

    def median(self) -> float | None:
        return statistics.median(self.samples) if len(self.samples) >= MIN_SAMPLES_FOR_ADAPTIVE else None


def progress_window(watch: Watch, clock: StepClock) -> float:
    if watch.hang_detection == "adaptive":
        median = clock.median()
        if median is not None:
            return max(watch.adaptive_min, watch.adaptive_multiplier * median)
    return watch.heartbeat_timeout


def check_hang(beats: dict[int, Heartbeat], *, world_size: int, attempt_started: float, now: float,
               watch: Watch, clock: StepClock | None = None) -> HangVerdict | None:
    """A hang: no rank has finished a step within ``startup_timeout`` of the attempt's start, or some
    rank has made no progress for the progress window since. A rank inside a checkpoint save gets
    the startup window (a save is slow, not hung); a rank that is done is never late."""
    started = [b for b in beats.values() if b.state != "starting"]
    if not started:
        stalled = now - attempt_started
        if stalled > watch.startup_timeout:
            return HangVerdict(stalled, sorted(set(range(world_size)) - set(beats)) or sorted(beats),
                               f"no rank finished a step within startup_timeout "
                               f"({watch.startup_timeout:g}s) of the attempt's start")
        return None
    window = progress_window(watch, clock or StepClock())
    last_progress = max(b.time for b in started)
    late: list[tuple[int, float, str]] = []
    for rank in range(world_size):
        beat = beats.get(rank)
        if beat is not None and beat.state == "done":
            continue
        since = beat.time if beat is not None and beat.state != "starting" else attempt_started
        allowed = watch.startup_timeout if beat is not None and beat.state == "saving" else window
        if now - since > allowed:
            what = (f"rank {rank} last reported step {beat.step}" if beat is not None and beat.state != "starting"
                    else f"rank {rank} never finished a step")
            late.append((rank, now - since, what))
    if not late:
        return None
    worst = max(late, key=lambda r: r[1])
    stalled = now - last_progress
    ranks = [r for r, _, _ in late]
    return HangVerdict(stalled, ranks,
                       f"no progress for {stalled:.1f}s (window {window:g}s): {worst[2]} "
                       f"{worst[1]:.1f}s ago; ranks past the window: {', '.join(map(str, ranks))}")
