"""The scheduler's clock and sleep: the real ones, or for tests a clock that runs ``speed`` times
faster than real time from a fixed start (``FSDP_ORCH_TEST_CLOCK=START,REAL_START,SPEED``, epoch
seconds), so a one-minute cron ticks every few real seconds and a restarted process reads the same
time as the one it replaced."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

TEST_CLOCK_ENV = "FSDP_ORCH_TEST_CLOCK"


def scheduler_clock() -> tuple[Callable[[], float], Callable[[float], None]]:
    spec = os.environ.get(TEST_CLOCK_ENV)
    if not spec:
        return time.time, time.sleep
    start, real_start, speed = (float(part) for part in spec.split(","))

    def clock() -> float:
        return start + (time.time() - real_start) * speed

    def sleep(seconds: float) -> None:
        time.sleep(max(0.0, seconds) / speed)

    return clock, sleep


__all__ = ["TEST_CLOCK_ENV", "scheduler_clock"]
