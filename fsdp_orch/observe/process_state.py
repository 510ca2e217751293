"""A rank's process state as its node sees it in ``/proc/<pid>/stat``: stopped, in uninterruptible
sleep, or neither. Torch-free.

A rank whose process is frozen writes no heartbeat at all (its watcher thread is frozen with it),
so from its heartbeat it is only "held": busy or stuck, no signal. From outside, on its own node,
the kernel says which: ``T`` (stopped: SIGSTOP, a VM's guest agent, a debugger's stop) and ``t``
(stopped under a tracer) make no progress until someone continues the process; ``D``
(uninterruptible sleep) is a wait in the kernel (a disk, a network file system, memory reclaim)
that ends on its own or never. A node's relay (its agent, an SSH host's report) samples the state
of the ranks whose heartbeat stands still (:class:`ProcessStates`) and sends it with their
heartbeat (``proc_state``, ``proc_state_since``); the hang rule judges it
(``decide.frozen_rank``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# The states that say a process is frozen, in the words the evidence and ``status`` use.
STOPPED = {"T": "stopped (state T: SIGSTOP or a debugger)",
           "t": "stopped (state t: held by a tracer, a debugger at a breakpoint)"}
UNINTERRUPTIBLE = {"D": "in uninterruptible sleep (state D: a disk, a network file system or "
                        "memory reclaim)"}
FROZEN = {**STOPPED, **UNINTERRUPTIBLE}
# The relay looks every 0.25 s (node agent) or 0.5 s (SSH report); a longer gap between its looks
# means the relay itself was held (paused with its node): a state seen before the gap is not known
# to have lasted through it, so it is timed afresh.
LOOK_GAP_S = 2.0


def parse_stat_state(stat: bytes) -> str | None:
    """The state letter of a ``/proc/<pid>/stat`` line (the field after the command's closing
    parenthesis: the command may hold spaces and parentheses); None when it is not one."""
    try:
        state = stat.rsplit(b")", 1)[1].split()[0].decode("ascii")
    except (IndexError, UnicodeDecodeError):
        return None
    return state if len(state) == 1 else None


def parse_io_total(io: bytes) -> int | None:
    """All the bytes a ``/proc/<pid>/io`` text says the process read and wrote, syscalls and
    storage; None when it says none of them."""
    total, found = 0, False
    for line in io.splitlines():
        name, _, value = line.partition(b":")
        if name.strip() in (b"rchar", b"wchar", b"read_bytes", b"write_bytes"):
            try:
                total += int(value)
                found = True
            except ValueError:
                continue
    return total if found else None


@dataclass(frozen=True)
class Sample:
    state: str
    io: int | None = None  # bytes moved so far (read for a process in ``D`` only)


def read_sample(pid: int) -> Sample | None:
    """The process's state now (and, in ``D``, its I/O so far); None when it has gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = parse_stat_state(f.read())
    except OSError:
        return None
    if state is None:
        return None
    io = None
    if state in UNINTERRUPTIBLE:
        try:
            with open(f"/proc/{pid}/io", "rb") as f:
                io = parse_io_total(f.read())
        except OSError:
            io = None
    return Sample(state, io)


class ProcessStates:
    """Since when each process has been frozen, as one relay samples it: the state must be seen at
    every look, and, in ``D``, with no byte read or written between looks (a slow write that moves
    is not frozen); a pid not asked about at a look is forgotten. ``read``: one pid's sample (the
    tests pass their own)."""

    def __init__(self, read: Callable[[int], Sample | None] = read_sample,
                 gap_s: float = LOOK_GAP_S):
        self.read, self.gap_s = read, gap_s
        self._seen: dict[int, tuple[Sample, float]] = {}  # pid -> (sample, since)
        self._looked_at: float | None = None

    def look(self, pids: list[int], now: float) -> dict[int, tuple[str, float]]:
        """The frozen ones among ``pids`` now: pid -> (state letter, since when)."""
        if self._looked_at is not None and now - self._looked_at > self.gap_s:
            self._seen = {}  # the relay was held itself: nothing is known to have lasted
        self._looked_at = now
        seen: dict[int, tuple[Sample, float]] = {}
        for pid in pids:
            sample = self.read(pid)
            if sample is None or sample.state not in FROZEN:
                continue
            before = self._seen.get(pid)
            since = before[1] if before is not None and before[0] == sample else now
            seen[pid] = (sample, since)
        self._seen = seen
        return {pid: (sample.state, since) for pid, (sample, since) in seen.items()}


def describe_state(state: str) -> str:
    """``stopped (state T: SIGSTOP or a debugger)``; the letter itself for one not frozen."""
    return FROZEN.get(state, f"in state {state}")


__all__ = ["FROZEN", "LOOK_GAP_S", "STOPPED", "UNINTERRUPTIBLE", "ProcessStates", "Sample",
           "describe_state", "parse_io_total", "parse_stat_state", "read_sample"]
