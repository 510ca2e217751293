"""Fault injection for testing the supervisor: ``FSDP_ORCH_FAULT`` names
what goes wrong, where and when.

Syntax: one or more ``kind:WHEN:rank=R[:attempt=K][:seconds=S]`` separated by ``;``, where WHEN is
``step=N`` (at the end of step N) or ``after=S`` (at the end of the first step that ends S seconds
or more after the end of this rank's first step in the attempt). ``attempt`` defaults to 0, so the
restarted attempt runs clean. ``after=`` is for soaks that do not know the step an attempt resumes
from: it counts from the attempt's first step, so start-up (imports, rendezvous, loading the
checkpoint) never eats into it, and a fault lands after S seconds of training. Kinds:

* ``hang``: the rank sleeps forever at the end of step N, so the others block in the next real
  collective (until the process group timeout).
* ``crash``: the rank exits with code 1 at once, with no Python traceback (like a segfault or an
  abort). A traceback would read as a bug in the user's code, which is not retried; a crash is.
* ``kill``: the rank sends itself SIGKILL.
* ``collective_timeout``: the rank skips the next collective: it sleeps past the process group
  timeout, so the others fail with a real gloo/NCCL timeout, then it exits with code 1.
* ``slow``: from step N on (or from S seconds after the first step on), the rank sleeps
  ``seconds`` per step (a straggler).
* ``checkpoint_crash``: the rank dies (``os._exit``) inside the first checkpoint save at or after
  step N (or the first one that starts S seconds or more after the first step), after its shard
  files are written and before the save is committed.

The parser is pure; :class:`FaultInjector` does the damage, reading its own clock (monotonic,
injectable) for ``after=``. No torch here.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

KINDS = ("hang", "crash", "kill", "collective_timeout", "slow", "checkpoint_crash")
# Injected only by fsdp_orch.runtime, inside its checkpoint save; the bootstrap injects the others
# in any script, at its optimizer steps (submit refuses these for a script without the runtime).
RUNTIME_ONLY_KINDS = ("checkpoint_crash",)
_KEYS = ("step", "after", "rank", "attempt", "seconds")


@dataclass(frozen=True)
class Fault:
    kind: str
    step: int | None  # at the end of this step; None when ``after`` says when
    rank: int
    attempt: int = 0
    seconds: float | None = None  # only for slow
    after: float | None = None  # seconds after the end of the attempt's first step on the rank

    def due(self, step: int, elapsed: float | None) -> bool:
        """At or past its time: ``step`` reached, or ``elapsed`` (seconds since the end of the
        attempt's first step; None before it) reached ``after``."""
        if self.step is not None:
            return step >= self.step
        assert self.after is not None
        return elapsed is not None and elapsed >= self.after


def _number(item: str, key: str, value: str, *, positive: bool) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"fault {item!r}: {key}: expected a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        want = "a positive number" if positive else "a number >= 0"
        raise ValueError(f"fault {item!r}: {key}: expected {want}, got {value!r}")
    return number


def _fields(item: str, fields: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for part in fields:
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise ValueError(f"fault {item!r}: expected key=value, got {part!r}")
        if key not in _KEYS:
            raise ValueError(f"fault {item!r}: unknown key {key!r}; expected {', '.join(_KEYS)}")
        if key in values:
            raise ValueError(f"fault {item!r}: {key} given twice")
        values[key] = value
    return values


def _parse_one(item: str) -> Fault:
    kind, *fields = [p.strip() for p in item.split(":")]
    if kind not in KINDS:
        raise ValueError(f"fault {item!r}: unknown kind {kind!r}; "
                         f"expected one of {', '.join(KINDS)}")
    values = _fields(item, fields)
    if "step" in values and "after" in values:
        raise ValueError(f"fault {item!r}: step= and after= exclude each other; give one")
    if "step" not in values and "after" not in values:
        raise ValueError(f"fault {item!r}: step=N or after=S is required (when it happens)")
    if "rank" not in values:
        raise ValueError(f"fault {item!r}: rank=N is required")
    ints: dict[str, int] = {}
    for key in ("step", "rank", "attempt"):
        if key in values:
            try:
                ints[key] = int(values[key])
            except ValueError:
                raise ValueError(f"fault {item!r}: {key}: expected an integer, "
                                 f"got {values[key]!r}") from None
            if ints[key] < 0:
                raise ValueError(f"fault {item!r}: {key}: expected >= 0, got {ints[key]}")
    after = _number(item, "after", values["after"], positive=False) if "after" in values else None
    seconds = None
    if "seconds" in values:
        if kind != "slow":
            raise ValueError(f"fault {item!r}: seconds= applies only to 'slow'")
        seconds = _number(item, "seconds", values["seconds"], positive=True)
    elif kind == "slow":
        raise ValueError(f"fault {item!r}: 'slow' needs seconds=S (the delay per step)")
    return Fault(kind, ints.get("step"), ints["rank"], ints.get("attempt", 0), seconds, after)


def parse_faults(text: str | None) -> list[Fault]:
    """Parse ``FSDP_ORCH_FAULT``; empty or None means no faults. Raises ValueError on a bad spec."""
    if not text or not text.strip():
        return []
    return [_parse_one(item.strip()) for item in text.split(";") if item.strip()]


class FaultInjector:
    """The faults of one rank in one attempt, applied at step ends and inside checkpoint saves.

    ``sleep``, ``exit`` and ``clock`` are injectable so unit tests can watch the decisions without
    dying or waiting. ``after=`` counts from the end of the first step this injector is told of.
    """

    def __init__(self, faults: list[Fault], rank: int, attempt: int, collective_timeout: float,
                 sleep: Callable[[float], None] = time.sleep,
                 exit: Callable[[int], None] = os._exit,
                 clock: Callable[[], float] = time.monotonic):
        self.faults = [f for f in faults if f.rank == rank and f.attempt == attempt]
        self.rank = rank
        self.collective_timeout = collective_timeout
        self._sleep = sleep
        self._exit = exit
        self._clock = clock
        self._first_step_at: float | None = None  # when the attempt's first step ended here
        self._fired: set[int] = set()  # the ``after=`` faults done (a test's exit returns)
        self._checkpoint_crash_done = False

    def __bool__(self) -> bool:
        return bool(self.faults)

    def _say(self, message: str) -> None:
        print(f"[fsdp-orch fault] rank {self.rank}: {message}", file=sys.stderr, flush=True)

    def _elapsed(self) -> float | None:
        """Seconds since the end of the attempt's first step on this rank (None before it)."""
        if self._first_step_at is None:
            return None
        return self._clock() - self._first_step_at

    def at_step_end(self, step: int) -> None:
        """Called once per completed step (before the next step's collectives)."""
        if not self.faults:
            return
        if self._first_step_at is None:
            self._first_step_at = self._clock()
        elapsed = self._elapsed()
        for number, fault in enumerate(self.faults):
            if fault.kind == "slow" and fault.due(step, elapsed):
                assert fault.seconds is not None
                self._sleep(fault.seconds)
            if fault.kind in ("slow", "checkpoint_crash"):
                continue
            if fault.step is not None and fault.step != step:
                continue
            if fault.step is None:
                if number in self._fired or not fault.due(step, elapsed):
                    continue
                self._fired.add(number)
            self._fire(fault, step, elapsed)

    def _fire(self, fault: Fault, step: int, elapsed: float | None) -> None:
        at = (f"step {step}" if fault.step is not None
              else f"step {step}, {elapsed or 0.0:.1f}s after the attempt's first step")
        if fault.kind == "crash":
            self._say(f"injected crash at {at}: exiting with code 1")
            self._exit_now(1)
        elif fault.kind == "kill":
            self._say(f"injected SIGKILL at {at}")
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault.kind == "hang":
            self._say(f"injected hang at {at}: sleeping forever before the next collective")
            while True:
                self._sleep(3600)
        elif fault.kind == "collective_timeout":
            wait = self.collective_timeout + 10.0
            self._say(f"injected collective timeout at {at}: skipping the next "
                      f"collective ({wait:g}s, the process group timeout is "
                      f"{self.collective_timeout:g}s)")
            self._sleep(wait)
            self._say("exiting after the skipped collective")
            self._exit_now(1)

    def checkpoint_crash_due(self, step: int) -> bool:
        """True for the first checkpoint save at or after a ``checkpoint_crash`` step, or the first
        one ``after`` seconds or more after the end of the attempt's first step."""
        if self._checkpoint_crash_done:
            return False
        elapsed = self._elapsed()
        return any(f.kind == "checkpoint_crash" and f.due(step, elapsed) for f in self.faults)

    def crash_in_checkpoint(self, step: int, written: list[str]) -> None:
        self._checkpoint_crash_done = True
        self._say(f"injected crash inside the checkpoint save of step {step} after writing "
                  f"{len(written)} file(s)")
        self._exit_now(1)

    def _exit_now(self, code: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit(code)


__all__ = ["Fault", "FaultInjector", "KINDS", "RUNTIME_ONLY_KINDS", "parse_faults"]
