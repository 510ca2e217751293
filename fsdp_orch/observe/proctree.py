"""Finding and stopping every process of a job on this machine.

torchrun starts its workers in new sessions, so a process group kill misses them when torchrun
itself dies first. Every process of a job inherits ``FSDP_ORCH_JOB_ID`` (and ``FSDP_ORCH_ATTEMPT``)
from the launch script, so scanning ``/proc/*/environ`` finds them all, orphans included.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from fsdp_orch.observe.process_state import parse_stat_state


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return parse_stat_state(f.read()) in (None, "Z")
    except OSError:
        return True


def job_processes_with(*assignments: str) -> list[int]:
    """Live processes whose environment holds every ``NAME=value`` given, excluding ourselves."""
    wanted = [a.encode() for a in assignments]
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        env = _environ(int(name)).split(b"\0")
        if all(w in env for w in wanted) and not _is_zombie(int(name)):
            found.append(int(name))
    return sorted(found)


def job_processes(job_id: str, attempt: int | None = None) -> list[int]:
    """Live processes carrying this job's id (and attempt) in their
    environment, excluding ourselves."""
    wanted = [f"FSDP_ORCH_JOB_ID={job_id}"]
    if attempt is not None:
        wanted.append(f"FSDP_ORCH_ATTEMPT={attempt}")
    return job_processes_with(*wanted)


def signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_job_processes(job_id: str, attempt: int | None = None, *, grace: float = 5.0,
                       pgid: int | None = None, sleep: Callable[[float], None] = time.sleep,
                       clock: Callable[[], float] = time.monotonic,
                       spare: tuple[int, ...] = (), node: int | None = None) -> list[int]:
    """SIGTERM the attempt's process group and tagged processes (and SIGCONT: a stopped one takes
    its SIGTERM only once continued), then SIGKILL what is left after ``grace`` seconds. Returns
    the pids that had to be killed. ``spare``: pids left to end on their own once the others have
    (a node script, whose last lines come after its ranks'). ``node``: only the processes of that
    node rank (``FSDP_ORCH_NODE_RANK``): a node's agent stops its own, where several nodes share a
    machine (the SLURM test cluster)."""
    wanted = [f"FSDP_ORCH_JOB_ID={job_id}"]
    if attempt is not None:
        wanted.append(f"FSDP_ORCH_ATTEMPT={attempt}")
    if node is not None:
        wanted.append(f"FSDP_ORCH_NODE_RANK={node}")

    def tagged() -> list[int]:
        return [pid for pid in job_processes_with(*wanted) if pid not in spare]

    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGTERM)
            os.killpg(pgid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass
    first = tagged()
    signal_pids(first, signal.SIGTERM)
    # A stopped process (SIGSTOP, a debugger's stop: a frozen rank) keeps its SIGTERM pending until
    # it is continued: continued, it ends now instead of at the SIGKILL after ``grace``.
    signal_pids(first, signal.SIGCONT)
    deadline = clock() + grace
    while clock() < deadline:
        if not tagged():
            return []
        sleep(0.1)
    left = tagged()
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    signal_pids(left, signal.SIGKILL)
    for _ in range(50):
        if not tagged():
            break
        sleep(0.1)
    return left


def pid_alive(pid: int | None, must_contain: str | None = None) -> bool:
    """Is ``pid`` running (and, against pid reuse,
    does its command line contain ``must_contain``)?"""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _is_zombie(pid):
        return False
    if must_contain is None:
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return must_contain.encode() in f.read()
    except OSError:
        return False
