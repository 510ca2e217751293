"""Following an attempt's logs as they are written (in chunks from its handle), feeding each log to
its own LineScanner."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import PurePosixPath

from fsdp_orch.supervise.diagnose import Diagnosis, LineScanner, torchrun_root_cause

# Failures of communication are most often the symptom of a peer that died first: when causes
# surface in the same poll, the others win.
COMMUNICATION = frozenset({"nccl_timeout", "nccl_error", "gloo_timeout_or_peer_lost", "rendezvous_failure"})


class LogFollower:
    """``read_chunks`` gives what each log (named by its path in the attempt's folder) gained since
    the last call; lines are scanned once they are whole."""

    def __init__(self, read_chunks: Callable[[], list[tuple[str, bytes]]]):
        self.read_chunks = read_chunks
        self.partial: dict[str, str] = {}
        self.scanners: dict[str, LineScanner] = {}
        self.cause: tuple[str, Diagnosis] | None = None
        self.cause_line = ""
        self.tail: dict[str, list[str]] = {}

    def poll(self, final: bool = False) -> Diagnosis | None:
        """The first root cause seen so far (strong signatures only unless ``final``). New lines are
        read on every poll, also after a cause was found: torchrun's summary of which rank failed
        first comes later and can outrank a lost peer."""
        fresh: list[tuple[str, Diagnosis, str]] = []
        appended: dict[str, bytes] = {}
        for source, data in self.read_chunks():
            appended[source] = appended.get(source, b"") + data
        sources = sorted(set(appended) | (set(self.partial) if final else set()))
        for path in sources:
            scanner = self.scanners.setdefault(path, LineScanner())
            had_cause = scanner.first is not None
            for line in self._new_lines(path, appended.get(path, b""), final):
                tail = self.tail.setdefault(path, [])
                tail.append(line)
                del tail[:-200]
                if not had_cause and scanner.feed(line) is not None:
                    fresh.append((path, scanner.first, line))
                    had_cause = True
        if self.cause is None and fresh:
            fresh.sort(key=lambda item: item[1].category in COMMUNICATION)
            path, diagnosis, line = fresh[0]
            self.cause = (path, diagnosis)
            self.cause_line = line
        if self.cause is not None:
            return self.cause[1]
        if final:
            # A bare exception line with no traceback around it is a hint for a reader, too weak to
            # stop a job's restarts on (the user's own errors are not retried).
            weak = [(p, s.weak) for p, s in self.scanners.items()
                    if s.weak is not None and s.weak.retryable]
            if weak:
                return weak[0][1]
        return None

    def _new_lines(self, path: str, data: bytes, final: bool) -> list[str]:
        text = self.partial.pop(path, "") + data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if not final and lines and lines[-1]:
            self.partial[path] = lines.pop()  # an unfinished line waits for its end
        elif lines and not lines[-1]:
            lines.pop()
        return lines

    def root_cause_rank(self) -> tuple[int, int, int] | None:
        """torchrun's first observed failure, (global rank, local rank, exit code), from the lines so far."""
        for lines in self.tail.values():
            found = torchrun_root_cause(lines)
            if found is not None:
                return found
        return None

    def cause_rank(self) -> int | None:
        """The local rank whose output held the cause, when the file or line prefix tells."""
        if self.cause is None:
            return None
        path = PurePosixPath(self.cause[0])
        if path.parent.name.isdigit() and path.parent.parent.name.startswith("attempt_"):
            return int(path.parent.name)
        m = re.match(r"\[default(\d+)\]:", self.cause_line)
        return int(m.group(1)) if m else None
