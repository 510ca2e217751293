"""Failure classification: a pure function of log text -> category, retryable, evidence.

Signatures (:mod:`fsdp_orch.supervise.log_signatures`) are checked line by line in the order the
lines were written; the first *root cause* wins. Lines that only report the consequence of another
failure (torchrun's "Sending process N closing signal SIGTERM", ChildFailedError, NCCL's "taking
the entire process down") never win over a cause. An exception that only carries another
(mp.spawn's ProcessRaisedException, an exception whose message starts on the next line) is never
the evidence when a real one follows: the innermost exception line is, with where it was raised;
one raised in torch_xla's own frames is ``xla_error``. A rank ended by a signal is named by it
(``killed_sigkill``, ``crashed_signal``); a fault fsdp-orch injected on purpose is
``injected_fault``. Weak signatures (a bare "NCCL WARN", "Broken pipe") count only when no strong
one is found. A process's refusal to start (argparse's ``error:`` line after its usage, python's
"can't open file") is never a cause in a live log: it is kept apart (``startup``) and decides only
at the exit, with the exit status it implies (:func:`startup_refusal`). What an exit status tells,
where the logs say nothing, is :mod:`fsdp_orch.supervise.exit_cause`'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from fsdp_orch.observe.user_frame import display_path, is_library_file
from fsdp_orch.supervise.log_signatures import (
    BUILTIN_EXCEPTION,
    CHECKPOINT_IO,
    CONSEQUENCE,
    CRASH,
    FRAME,
    INJECTED,
    KILL_EXPLAINS,
    LOG_PREFIX,
    ORDINARY_EXCEPTION,
    RAISED_IN,
    STACK_DUMP,
    STARTUP,
    STRONG,
    TRACEBACK,
    USAGE,
    USAGE_ERROR,
    USAGE_EXIT,
    USAGE_SPAN,
    WEAK,
    WRAPPER,
    match_rule,
)
from fsdp_orch.supervise.signals import signal_category, signal_named
from fsdp_orch.supervise.torchrun_summary import FailuresList
from fsdp_orch.vocab.categories import (
    COMMUNICATION,
    FAILURE_CATEGORIES,
    NOT_RETRYABLE,
    FailureCategory,
)
from fsdp_orch.vocab.hints import hint_for

CATEGORIES = FAILURE_CATEGORIES
# The fsdp_orch runtime's warnings tell of what it handled itself (a checkpoint that would not load,
# skipped for an earlier one): never a failure's cause, whatever error they quote.
RUNTIME_WARNING = "[fsdp-orch] warning: "
# ...those of a load it recovered from (ckpt_restore, checkpoint.restore); a save it could not
# commit (a full disk) is still a cause
RECOVERED_LOADS = tuple(RUNTIME_WARNING + start for start in (
    "skipping checkpoint", "checkpoint ", "starting from step"))


@dataclass(frozen=True, init=False)
class Diagnosis:
    category: FailureCategory
    retryable: bool
    evidence: str | None  # the line that decided it
    line: int | None = None  # 1-based line number in the text it came from

    def __init__(self, category: FailureCategory | str, retryable: bool, evidence: str | None,
                 line: int | None = None):
        """``category``: the word, or its string (an unknown one is a ValueError)."""
        object.__setattr__(self, "category", FailureCategory(category))
        object.__setattr__(self, "retryable", retryable)
        object.__setattr__(self, "evidence", evidence)
        object.__setattr__(self, "line", line)

    @property
    def hint(self) -> str:
        """What the user can do about it."""
        return hint_for(self.category, self.evidence)

    def to_json(self) -> dict[str, object]:
        return {"category": self.category, "retryable": self.retryable, "evidence": self.evidence,
                "line": self.line, "hint": self.hint}


def display_frame(file: str, line: str | int, func: str | None = None) -> str:
    """A frame as evidence names it, as the hang evidence does: user code by its base name, library
    code as ``.../pkg/mod.py``."""
    where = f"{display_path(file.replace(chr(92), '/'), ())}:{line}"
    return f"{where} in {func}" if func else where


def _is_library(file: str) -> bool:
    return is_library_file(file.replace(chr(92), "/"), ())


# The note a Diagnosis adds after the line it quotes: where the exception was raised, or the signal
# a line names only by its number.
_NOTE = re.compile(r" \((?:at [^()]*(?:\([^()]*\)[^()]*)*|SIG[A-Z0-9]+|signal \d+)\)$")


def quoted(evidence: str) -> str:
    """The line of the log an evidence quotes, without the note the classifier adds to it."""
    return _NOTE.sub("", evidence)


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


@dataclass
class _Traceback:
    """What is known of the traceback being read: its frames' indent, its last frame and its last
    frame of user code, and whether it went through checkpoint I/O."""

    base: int = 0  # the indent of its exception line (2 in torchrun's failure summary, else 0)
    frame_seen: bool = False
    last: tuple[str, str, str | None] | None = None
    user: tuple[str, str, str | None] | None = None
    checkpoint_io: bool = False

    def where(self) -> str:
        """`` (at .../torch/cuda/__init__.py:261 in set_device,
        from train.py:50 in main)``, or ``""``."""
        if self.last is None:
            return ""
        note = display_frame(*self.last)
        if self.user is not None and self.user != self.last:
            note += f", from {display_frame(*self.user)}"
        return f" (at {note})"


class LineScanner:
    """Feeds lines one at a time (a live log); remembers the first root
    cause and the first weak sign.

    One scanner per stream: a Python traceback is followed line by line to its exception line.
    """

    def __init__(self) -> None:
        self.first: Diagnosis | None = None
        self.weak: Diagnosis | None = None
        # An exception that carries another, until that one is read.
        self.wrapper: Diagnosis | None = None
        self._in_traceback = False
        self._tb = _Traceback()
        self._checkpoint_frame: tuple[str, int] | None = None
        self._crashed = False
        self._failures = FailuresList()  # torchrun's "Failures:" list (ranks that failed later)
        self._killed_after: Diagnosis | None = None  # a SIGKILL reported after a lost peer
        # a refusal to start and the exit status it ends its process with (never a live cause)
        self.startup: tuple[Diagnosis, int] | None = None
        self._usage_at: int | None = None  # the line number of the last "usage:" line
        self._count = 0

    def feed(self, raw: str) -> Diagnosis | None:
        """Returns the root cause as soon as one is known (and keeps returning it)."""
        self._count += 1
        body = LOG_PREFIX.sub("", raw.rstrip("\r\n"))
        line = body.strip()
        if self.first is not None:
            self._after_cause(line)
            return self.first
        if not line or self._failures.note(line) or line.startswith(RECOVERED_LOADS):
            return None
        frame = FRAME.match(body)
        if TRACEBACK in line or line.startswith("Exception in thread") or frame:
            return self._traceback_line(body, line, frame)
        return self._other_line(body, line)

    def _after_cause(self, line: str) -> None:
        """Once the cause is a lost peer: a rank's SIGKILL reported later (outside torchrun's list
        of the ranks it stopped itself) is kept, as what the peer was lost to."""
        if self.first is not None and self.first.category in KILL_EXPLAINS \
                and self._killed_after is None and line:
            if not self._failures.note(line):
                self._killed_after = self._signal(line, only=FailureCategory.KILLED_SIGKILL)

    def _traceback_line(self, body: str, line: str,
                        frame: re.Match[str] | None) -> Diagnosis | None:
        """A traceback's header or one of its frames: followed, not a cause (unless a whole log was
        collapsed onto the line)."""
        if not self._in_traceback or (TRACEBACK in line and self.wrapper is not None):
            self._tb = _Traceback()
        self._in_traceback = True
        self._note_checkpoint_io(line)
        if frame:
            self._note_frame(frame, body)
        rest = body[frame.end():] if frame else ""
        # What follows a frame on its line, when that long, is a whole log collapsed onto one line.
        category = match_rule(STRONG, rest) if len(rest) > 80 else None
        if category is not None:
            self.first = Diagnosis(category, category not in NOT_RETRYABLE, line, self._count)
        return self.first

    def _other_line(self, body: str, line: str) -> Diagnosis | None:
        """Any other line: an injected fault, a strong signature, a signal, a traceback's exception
        line, an exception that carries another, or a weak sign."""
        if self._in_traceback and body[:1].isspace():
            self._note_checkpoint_io(line)
        if CRASH.search(line):
            self._crashed = True
        self._note_startup(line)
        evidence = line
        injected = INJECTED.search(line)
        if injected:
            self.first = Diagnosis(FailureCategory.INJECTED_FAULT, True, line[injected.start():],
                                   self._count)
            return self.first
        # What only reports another failure is cut out; what is left of the line may still be a
        # cause, but never a traceback's exception line: torchrun's "failed (exitcode: 1)", written
        # into a traceback it interleaves with, is no exception of the rank's.
        reports_another = CONSEQUENCE.search(line) is not None
        line = CONSEQUENCE.sub(" ", line).strip()
        if len(line) < 3:
            if not body[:1].isspace() and self.wrapper is None:
                self._in_traceback = False  # e.g. torchrun's own traceback ends in ChildFailedError
            return None
        category = match_rule(STRONG, line)
        exception_line = self._in_traceback and not reports_another \
            and _indent(body) <= self._tb.base \
            and not line.startswith(("File ", "^", "~", "During handling", "The above")) \
            and ORDINARY_EXCEPTION.match(line)
        where = self._tb.where() if exception_line else ""
        if category is not None:
            self.first = Diagnosis(category, category not in NOT_RETRYABLE, evidence + where,
                                   self._count)
            return self.first
        signalled = self._signal(evidence, where=where)
        if signalled is not None:
            self.first = signalled
            return self.first
        if exception_line:
            return self._exception(evidence, where)
        if self.wrapper is None and WRAPPER.match(line) and not body[:1].isspace():
            self._wrap(evidence)  # also where an excerpt lost the traceback above it
            return None
        if self.weak is None:
            self._note_weak(body, line, evidence)
        return None

    def _note_weak(self, body: str, line: str, evidence: str) -> None:
        """The first weak sign: a weak signature, a bare exception line of Python's own types, or a
        stack dump (not a crash handler's)."""
        weak = match_rule(WEAK, line)
        if weak is None and BUILTIN_EXCEPTION.match(line) and not body[:1].isspace():
            weak = FailureCategory.USER_CODE_ERROR
        if weak is None and not self._crashed and STACK_DUMP.match(line):
            weak = FailureCategory.HANG
        if weak is not None:
            self.weak = Diagnosis(weak, weak not in NOT_RETRYABLE, evidence, self._count)

    def _exception(self, evidence: str, where: str) -> Diagnosis | None:
        """The line that ends a traceback: a user's error (or the library's it was raised in),
        unless it only carries another exception."""
        self._in_traceback = False
        if WRAPPER.match(evidence):
            self._wrap(evidence + where)
            return None
        if evidence.startswith("KeyboardInterrupt"):  # someone stopped a process that sat still
            self.weak = self.weak or Diagnosis(FailureCategory.HANG, True, evidence, self._count)
            return None
        category = (FailureCategory.CHECKPOINT_ERROR if self._tb.checkpoint_io
                    else self._raised_in())
        self.first = Diagnosis(category, category not in NOT_RETRYABLE, evidence + where,
                               self._count)
        return self.first

    def _raised_in(self) -> str:
        """The category of the library the exception was raised in
        (its last frame), else the user's."""
        if self._tb.last is not None:
            for pattern, category in RAISED_IN:
                if pattern.search(self._tb.last[0]):
                    return category
        return FailureCategory.USER_CODE_ERROR

    def _wrap(self, evidence: str) -> None:
        """An exception that carries another: the evidence only if no real exception follows. What
        follows is read as the inner exception's traceback, even where its header was cut off."""
        self.wrapper = Diagnosis(FailureCategory.USER_CODE_ERROR, False, evidence, self._count)
        self._in_traceback = True
        self._tb = _Traceback()

    def _signal(self, line: str, where: str = "", only: str | None = None) -> Diagnosis | None:
        """A line that says a process ended by a signal, as a cause;
        the signal's name is added where the line gives only its number."""
        name = signal_named(line)
        category = signal_category(name) if name else None
        if name is None or category is None or (only is not None and category != only):
            return None
        note = where or ("" if name in line else f" ({name})")
        return Diagnosis(category, True, line + note, self._count)

    def _note_frame(self, frame: re.Match[str], body: str) -> None:
        tb = self._tb
        if not tb.frame_seen:
            tb.frame_seen = True
            tb.base = max(0, _indent(body) - 2)
        tb.last = (frame["file"], frame["line"], frame["func"])
        if not _is_library(frame["file"]):
            tb.user = tb.last

    def _note_startup(self, line: str) -> None:
        """The first refusal to start: an ``error:`` line within USAGE_SPAN lines after a usage,
        or the interpreter's own (a script it cannot open, a module it cannot find)."""
        if USAGE.match(line):
            self._usage_at = self._count
            return
        if self.startup is not None:
            return
        if self._usage_at is not None and self._count - self._usage_at <= USAGE_SPAN \
                and USAGE_ERROR.match(line):
            self.startup = (Diagnosis(FailureCategory.USER_CODE_ERROR, False, line, self._count),
                            USAGE_EXIT)
            return
        for pattern, status in STARTUP:
            if pattern.match(line):
                self.startup = (Diagnosis(FailureCategory.USER_CODE_ERROR, False, line,
                                          self._count), status)
                return

    def _note_checkpoint_io(self, line: str) -> None:
        if CHECKPOINT_IO.search(line):
            self._tb.checkpoint_io = True
            self._checkpoint_frame = self._checkpoint_frame or (line, self._count)

    def result(self) -> Diagnosis | None:
        """The root cause (a SIGKILL of a rank rather than the lost peer it caused), else a
        traceback through checkpoint I/O cut off before its exception line, else an exception that
        only carried another whose inner exception never came, else a refusal to start, else the
        first weak sign."""
        if self.first is not None:
            return self._killed_after or self.first
        if self._in_traceback and self._checkpoint_frame is not None:
            line, number = self._checkpoint_frame
            return Diagnosis(FailureCategory.CHECKPOINT_ERROR, False, line, number)
        return self.wrapper or (self.startup[0] if self.startup else None) or self.weak


def startup_refusal(lines: Iterable[str], status: int) -> Diagnosis | None:
    """A refusal to start in ``lines`` (one log's last lines) whose process ends with ``status``,
    the exit status of the rank that failed first: argparse's usage error exits 2, so a usage
    error a healthy job's subprocess printed is not the cause of a rank that exited 1."""
    scanner = LineScanner()
    for line in lines:
        scanner.feed(line)
    if scanner.startup is not None and scanner.startup[1] == status:
        return scanner.startup[0]
    return None


def diagnose_text(text: str) -> Diagnosis:
    """The category of the first root cause in ``text``; ``unknown`` when nothing is recognised."""
    scanner = LineScanner()
    for line in text.splitlines():
        cause = scanner.feed(line)
        if cause is not None and (cause.category not in COMMUNICATION
                                  or scanner.result() is not cause):
            break
    return scanner.result() or Diagnosis(FailureCategory.UNKNOWN, True, None, None)


def diagnose_lines(lines: Iterable[str]) -> Diagnosis:
    return diagnose_text("\n".join(lines))
