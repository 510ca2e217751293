"""Following an attempt's log files as they are written, feeding each to its own LineScanner."""

from __future__ import annotations

import re
from pathlib import Path

from fsdp_orch.supervise.diagnose import Diagnosis, LineScanner, torchrun_root_cause

# Failures of communication are most often the symptom of a peer that died first: when causes
# surface in the same poll, the others win.
COMMUNICATION = frozenset({"nccl_timeout", "nccl_error", "gloo_timeout_or_peer_lost", "rendezvous_failure"})


class LogFollower:
    """Reads only what was appended since the last poll. ``patterns`` are globs under ``root``."""

    def __init__(self, root: Path, patterns: tuple[str, ...]):
        self.root = root
        self.patterns = patterns
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, str] = {}
        self.scanners: dict[Path, LineScanner] = {}
        self.cause: tuple[Path, Diagnosis] | None = None
        self.cause_line = ""
        self.tail: dict[Path, list[str]] = {}

    def files(self) -> list[Path]:
        found: set[Path] = set()
        for pattern in self.patterns:
            found.update(self.root.glob(pattern))
        return sorted(found)

    def poll(self, final: bool = False) -> Diagnosis | None:
        """The first root cause seen so far (strong signatures only unless ``final``). New lines are
        read on every poll, also after a cause was found: torchrun's summary of which rank failed
        first comes later and can outrank a lost peer."""
        fresh: list[tuple[Path, Diagnosis, str]] = []
        for path in self.files():
            scanner = self.scanners.setdefault(path, LineScanner())
            had_cause = scanner.first is not None
            for line in self._new_lines(path, final):
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
            weak = [(p, s.weak) for p, s in self.scanners.items() if s.weak is not None]
            if weak:
                return weak[0][1]
        return None

    def _new_lines(self, path: Path, final: bool) -> list[str]:
        try:
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
                self.offsets[path] = f.tell()
        except OSError:
            return []
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
        path = self.cause[0]
        if path.parent.name.isdigit() and path.parent.parent.name.startswith("attempt_"):
            return int(path.parent.name)
        m = re.match(r"\[default(\d+)\]:", self.cause_line)
        return int(m.group(1)) if m else None


def attempt_log_patterns() -> tuple[str, ...]:
    """torchrun's per-rank files and the per-node console logs of an attempt directory."""
    return ("node-*/*/attempt_*/*/stderr.log", "node-*/*/attempt_*/*/stdout.log", "console-node-*.log")
