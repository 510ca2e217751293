"""Where the suite's time goes (issue 40): with ``FSDP_ORCH_TEST_TIMES=FILE`` set, one JSON line per
test phase (setup, call, teardown) with its wall time and the CPU time the whole machine spent in
it, read from ``/proc/stat`` (the tests' own processes, their torchrun ranks and daemons, and
anything else running). ``scripts/test_times.py FILE`` folds the lines into the table the README
shows: per file, the wall time and how much of it the cores were busy; the rest is waiting.
A pytest plugin (``pytest_plugins`` in conftest.py); without the variable it does nothing."""

from __future__ import annotations

import json
import os
import time

import pytest

_OUT = os.environ.get("FSDP_ORCH_TEST_TIMES")


def _busy_seconds() -> float:
    """CPU seconds the machine has spent not idle (all cores), from boot."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


_PHASE = pytest.StashKey[dict]()


def _record(item: pytest.Item, phase: str, wall: float, busy: float, outcome: str) -> None:
    line = json.dumps({"test": item.nodeid, "phase": phase, "wall_s": round(wall, 3),
                       "busy_cpu_s": round(busy, 3), "cores": os.cpu_count(), "outcome": outcome,
                       "at": round(time.time(), 3),
                       # under xdist the CPU is the machine's, shared
                       "worker": os.environ.get("PYTEST_XDIST_WORKER", "")})
    with open(_OUT, "a") as f:  # type: ignore[arg-type]
        f.write(line + "\n")


def _timed(item: pytest.Item, phase: str):  # type: ignore[no-untyped-def]
    wall, busy = time.monotonic(), _busy_seconds()
    try:
        yield
    finally:  # written with its outcome once the phase's report is made
        item.stash.setdefault(_PHASE, {})[phase] = (time.monotonic() - wall, _busy_seconds() - busy)


if _OUT:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(item: pytest.Item):  # type: ignore[no-untyped-def]
        yield from _timed(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
        yield from _timed(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(item: pytest.Item):  # type: ignore[no-untyped-def]
        yield from _timed(item, "teardown")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item: pytest.Item,  # type: ignore[no-untyped-def]
                                  call: pytest.CallInfo):
        made = yield
        timed = item.stash.get(_PHASE, {}).pop(call.when, None)
        if timed is not None:
            _record(item, call.when, *timed, made.get_result().outcome)
