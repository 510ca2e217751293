"""Following an attempt's logs as they are written (in chunks from its handle), feeding each log to
its own LineScanner (failure causes) and its own LossReader
(the training loss the script prints)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import PurePosixPath

from fsdp_orch.observe.console_loss import LossReader
from fsdp_orch.supervise.diagnose import Diagnosis, LineScanner
from fsdp_orch.supervise.torchrun_summary import torchrun_root_cause
from fsdp_orch.vocab.categories import COMMUNICATION, SIGNAL_ENDINGS, FailureCategory

LOSS_POINTS_HELD = 10_000  # console losses kept between two takes (a reader that never takes)
# What a rank's log can say after its peer was lost, as an echo of that (outranks_a_lost_peer)
MAYBE_AN_ECHO = COMMUNICATION | SIGNAL_ENDINGS | {FailureCategory.PREEMPTION_OR_NODE_LOST,
                                                  FailureCategory.CHECKPOINT_ERROR,
                                                  FailureCategory.UNKNOWN}


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
        self.loss_readers: dict[str, LossReader] = {}
        self.loss: tuple[float, str] | None = None  # the latest console loss and its format
        self._loss_rank = 3  # how near rank 0 the log that gave it is (0: rank 0's own file)
        # every loss of that log since ``take_loss_points``: (loss, source, the step its line names)
        self.loss_points: list[tuple[float, str, int | None]] = []

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
            text = appended.get(path, b"").decode("utf-8", errors="replace")
            self._read_loss(path, text, final)
            for line in self._new_lines(path, text, final):
                tail = self.tail.setdefault(path, [])
                tail.append(line)
                del tail[:-200]
                found = scanner.feed(line) if not had_cause else None
                if found is not None and scanner.first is not None:
                    fresh.append((path, scanner.first, line))
                    had_cause = True
        if fresh:
            fresh.sort(key=lambda item: item[1].category in COMMUNICATION)
            path, diagnosis, line = fresh[0]
            if self.cause is None or outranks_a_lost_peer(self.cause, path, diagnosis):
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

    def _new_lines(self, path: str, data: str, final: bool) -> list[str]:
        text = self.partial.pop(path, "") + data
        lines = text.split("\n")
        if not final and lines and lines[-1]:
            self.partial[path] = lines.pop()  # an unfinished line waits for its end
        elif lines and not lines[-1]:
            lines.pop()
        return lines

    def _read_loss(self, path: str, text: str, final: bool) -> None:
        """Keep the latest loss from the log nearest rank 0 that has shown one: rank 0's own file,
        then node 0's console lines of local rank 0 (or of no rank), then any other."""
        reader = self.loss_readers.setdefault(path, LossReader())
        for loss, source, prefix_rank, step in reader.feed_points(text, final):
            nearness = nearness_to_rank_0(path, prefix_rank)
            if nearness <= self._loss_rank:
                self.loss, self._loss_rank = (loss, source), nearness
                self.loss_points.append((loss, source, step))
        del self.loss_points[:-LOSS_POINTS_HELD]

    def take_loss_points(self) -> list[tuple[float, str, int | None]]:
        """The console losses read since the last call (the log nearest rank 0), in order."""
        points, self.loss_points = self.loss_points, []
        return points

    def root_cause_rank(self) -> tuple[int, int, int] | None:
        """torchrun's first observed failure, (global rank, local rank,
        exit code), from the lines so far."""
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


def outranks_a_lost_peer(cause: tuple[str, Diagnosis], path: str, found: Diagnosis) -> bool:
    """Whether ``found``, read in the log ``path``, is the cause in place of ``cause`` (a log's
    path and its first cause): a lost peer read first, then a peer's own error in another log.
    Another node's log reaches the supervisor a batch later (its node agent forwards it), so a
    rank that crashed on node 1 was read after rank 0's "Connection reset by peer" on node 0, and
    the echo was named. A signal or SIGTERM read later is no such error: it may be the echo of the
    attempt's stop (a pod of a failed Job is deleted by its controller). Nor is a checkpoint
    error: a rank inside a save's collective that lost its peer ends in checkpoint frames."""
    return (cause[1].category in COMMUNICATION and path != cause[0]
            and found.category not in MAYBE_AN_ECHO)


def nearness_to_rank_0(path: str, prefix_rank: int | None) -> int:
    """0: global rank 0's own log (node-0/<run>/attempt_K/0/std*.log, see
    ``observe.attempt_files.LOG_PATTERNS``); 1: node 0's console, lines of local rank 0 or of no
    rank prefix (``launcher: python``); 2: any other log."""
    parts = PurePosixPath(path).parts
    if len(parts) == 5 and parts[2].startswith("attempt_"):
        return 0 if parts[0] == "node-0" and parts[3] == "0" else 2
    if parts == ("console-node-0.log",) and prefix_rank in (None, 0):
        return 1
    return 2
