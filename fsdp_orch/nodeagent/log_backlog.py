"""What the nodes' logs gained, on the supervisor's side, as their relays send it (the node agents'
channel, an SSH host's report stream): each byte taken once however often it is sent (a relay that
reconnects sends again from where it last knew), and kept until the watchdog takes it, at most
``LOG_KEPT_BYTES`` waiting (past it, the oldest go). Stdlib only."""

from __future__ import annotations

LOG_KEPT_BYTES = 16 << 20


def unseen(have: int, at: int, data: bytes) -> tuple[bytes, int]:
    """Of ``data``, which a log holds from offset ``at``, the bytes past the ``have`` already
    taken, and how many of the log's bytes are taken then."""
    if at + len(data) <= have:
        return b"", have
    new = data[have - at:] if at < have else data
    return new, max(have, at) + len(new)


class LogBacklog:
    """(log name, bytes) in the order they came, until ``take``. Not locked: its owner's lock
    guards it."""

    def __init__(self, kept: int = LOG_KEPT_BYTES):
        self.kept = kept
        self._chunks: list[tuple[str, bytes]] = []
        self._bytes = 0  # in _chunks

    def add(self, name: str, data: bytes) -> None:
        self._chunks.append((name, data))
        self._bytes += len(data)
        while self._bytes > self.kept:  # nobody took them: the oldest go
            self._bytes -= len(self._chunks.pop(0)[1])

    def take(self) -> list[tuple[str, bytes]]:
        chunks, self._chunks, self._bytes = self._chunks, [], 0
        return chunks


__all__ = ["LOG_KEPT_BYTES", "LogBacklog", "unseen"]
