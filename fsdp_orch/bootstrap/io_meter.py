"""Is this process writing? The bytes it wrote, from the kernel's per-process I/O counters.

A checkpoint save can keep a rank's main thread in one native call for longer than the hang window
(``torch.save`` of a large tensor, a thread pool of writers joined by the main thread), and that
rank's peers wait for it in a collective. Neither shows Python running; the bytes written tell a
slow save that makes progress from a write stuck on a dead filesystem.

``/proc/self/io`` has two counters, both read: ``wchar`` (bytes handed to write-family system calls,
counted when a call returns) and ``write_bytes`` (bytes sent towards storage, counted as page-cache
pages are dirtied, so it also grows inside one long ``write``; tmpfs does not count it). The meter
counts progress when either grew by ``min_bytes`` since the last sample: the heartbeat's own small
writes and a trickle of log lines stay below it. Stdlib only (it runs in every Python process).
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

IO_FILE = "/proc/self/io"
# Per sample (the agent samples every 0.5 s): 64 KiB per 0.5 s is 128 KB/s, far above a
# heartbeat file (~300 bytes) and log lines, far below any save that makes progress.
MIN_BYTES_PER_SAMPLE = 64 * 1024


def parse_io(text: str) -> tuple[int, int] | None:
    """(wchar, write_bytes) from the text of ``/proc/PID/io``; None if either is missing."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("wchar", "write_bytes"):
            try:
                fields[key] = int(value)
            except ValueError:
                return None
    if len(fields) != 2:
        return None
    return fields["wchar"], fields["write_bytes"]


def read_own_io() -> tuple[int, int] | None:
    try:
        with open(IO_FILE, encoding="ascii") as f:
            return parse_io(f.read())
    except (OSError, ValueError):
        return None  # no procfs (not Linux), or hidden in this container


class WriteMeter:
    """``io_at``: when the process last wrote at least ``min_bytes`` between two samples."""

    def __init__(self, clock: Callable[[], float] = time.time,
                 read: Callable[[], tuple[int, int] | None] = read_own_io,
                 min_bytes: int = MIN_BYTES_PER_SAMPLE):
        self._clock = clock
        self._read = read
        self._min_bytes = min_bytes
        self._last = read()
        self.io_at: float | None = None

    def sample(self) -> None:
        now = self._read()
        if now is None:
            return
        last, self._last = self._last, now
        if last is None:
            return
        if max(now[0] - last[0], now[1] - last[1]) >= self._min_bytes:
            self.io_at = self._clock()


__all__ = ["MIN_BYTES_PER_SAMPLE", "WriteMeter", "parse_io", "read_own_io"]
