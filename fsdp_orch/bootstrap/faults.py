"""Fault injection for testing the supervisor: ``FSDP_ORCH_FAULT`` names
what goes wrong, where and when.

Syntax: one or more ``kind:step=N:rank=R[:attempt=K][:seconds=S]`` separated by ``;``. ``attempt``
defaults to 0, so the restarted attempt runs clean. Kinds:

* ``hang``: the rank sleeps forever at the end of step N, so the others block in the next real
  collective (until the process group timeout).
* ``crash``: the rank exits with code 1 at once, with no Python traceback (like a segfault or an
  abort). A traceback would read as a bug in the user's code, which is not retried; a crash is.
* ``kill``: the rank sends itself SIGKILL.
* ``collective_timeout``: the rank skips the next collective: it sleeps past the process group
  timeout, so the others fail with a real gloo/NCCL timeout, then it exits with code 1.
* ``slow``: from step N on, the rank sleeps ``seconds`` per step (a straggler).
* ``checkpoint_crash``: the rank dies (``os._exit``) inside the first checkpoint save at or after
  step N, after its shard files are written and before the save is committed.

The parser is pure; :class:`FaultInjector` does the damage. No torch here.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

KINDS = ("hang", "crash", "kill", "collective_timeout", "slow", "checkpoint_crash")
_KEYS = ("step", "rank", "attempt", "seconds")


@dataclass(frozen=True)
class Fault:
    kind: str
    step: int
    rank: int
    attempt: int = 0
    seconds: float | None = None  # only for slow


def _parse_one(item: str) -> Fault:
    kind, *fields = [p.strip() for p in item.split(":")]
    if kind not in KINDS:
        raise ValueError(f"fault {item!r}: unknown kind {kind!r}; "
                         f"expected one of {', '.join(KINDS)}")
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
    for required in ("step", "rank"):
        if required not in values:
            raise ValueError(f"fault {item!r}: {required}=N is required")
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
    seconds = None
    if "seconds" in values:
        if kind != "slow":
            raise ValueError(f"fault {item!r}: seconds= applies only to 'slow'")
        try:
            seconds = float(values["seconds"])
        except ValueError:
            raise ValueError(f"fault {item!r}: seconds: expected a number, "
                             f"got {values['seconds']!r}") from None
        if not seconds > 0 or seconds == float("inf"):
            raise ValueError(f"fault {item!r}: seconds: expected a positive number, "
                             f"got {values['seconds']!r}")
    elif kind == "slow":
        raise ValueError(f"fault {item!r}: 'slow' needs seconds=S (the delay per step)")
    return Fault(kind, ints["step"], ints["rank"], ints.get("attempt", 0), seconds)


def parse_faults(text: str | None) -> list[Fault]:
    """Parse ``FSDP_ORCH_FAULT``; empty or None means no faults. Raises ValueError on a bad spec."""
    if not text or not text.strip():
        return []
    return [_parse_one(item.strip()) for item in text.split(";") if item.strip()]


class FaultInjector:
    """The faults of one rank in one attempt, applied at step ends and inside checkpoint saves.

    ``sleep`` and ``exit`` are injectable so unit tests can watch the decisions without dying.
    """

    def __init__(self, faults: list[Fault], rank: int, attempt: int, collective_timeout: float,
                 sleep: Callable[[float], None] = time.sleep,
                 exit: Callable[[int], None] = os._exit):
        self.faults = [f for f in faults if f.rank == rank and f.attempt == attempt]
        self.rank = rank
        self.collective_timeout = collective_timeout
        self._sleep = sleep
        self._exit = exit
        self._checkpoint_crash_done = False

    def __bool__(self) -> bool:
        return bool(self.faults)

    def _say(self, message: str) -> None:
        print(f"[fsdp-orch fault] rank {self.rank}: {message}", file=sys.stderr, flush=True)

    def at_step_end(self, step: int) -> None:
        """Called once per completed step (before the next step's collectives)."""
        for fault in self.faults:
            if fault.kind == "slow" and step >= fault.step:
                assert fault.seconds is not None
                self._sleep(fault.seconds)
            if fault.step != step:
                continue
            if fault.kind == "crash":
                self._say(f"injected crash at step {step}: exiting with code 1")
                self._exit_now(1)
            elif fault.kind == "kill":
                self._say(f"injected SIGKILL at step {step}")
                os.kill(os.getpid(), signal.SIGKILL)
            elif fault.kind == "hang":
                self._say(f"injected hang at step {step}: "
                          "sleeping forever before the next collective")
                while True:
                    self._sleep(3600)
            elif fault.kind == "collective_timeout":
                wait = self.collective_timeout + 10.0
                self._say(f"injected collective timeout at step {step}: skipping the next "
                          f"collective ({wait:g}s, the process group timeout is "
                          f"{self.collective_timeout:g}s)")
                self._sleep(wait)
                self._say("exiting after the skipped collective")
                self._exit_now(1)

    def checkpoint_crash_due(self, step: int) -> bool:
        """True for the first checkpoint save at or after a ``checkpoint_crash`` step."""
        if self._checkpoint_crash_done:
            return False
        return any(f.kind == "checkpoint_crash" and step >= f.step for f in self.faults)

    def crash_in_checkpoint(self, step: int, written: list[str]) -> None:
        self._checkpoint_crash_done = True
        self._say(f"injected crash inside the checkpoint save of step {step} after writing "
                  f"{len(written)} file(s)")
        self._exit_now(1)

    def _exit_now(self, code: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit(code)


__all__ = ["Fault", "FaultInjector", "KINDS", "parse_faults"]
