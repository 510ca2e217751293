"""Thread stacks as data (``Frame``, ``ThreadStack``), and the parsers that read them from
``py-spy dump`` output and from faulthandler's traceback dump: pure functions of text (real
captured output is in ``tests/fixtures/stacks/``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PYSPY_THREAD = re.compile(r'Thread (0[xX][0-9a-fA-F]+|\d+) \(([a-z+]+)\)(?:: "(.*)")?')
_PYSPY_FRAME = re.compile(r" {4}(\S.*?) \((.+):(\d+)\)")
_PYSPY_NATIVE_FRAME = re.compile(r" {4}(\S.*) \(([^()]*)\)")  # no line: native or unknown
_FH_THREAD = re.compile(r"(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*)\])? "
                        r"\(most recent call first\):")
_FH_STACK = "Stack (most recent call first):"  # all_threads=False
_FH_FRAME = re.compile(r'  File "(.*)", line (\d+|\?\?\?) in (.*)')

@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int | None  # None: not known (a native frame, or py-spy printed no line)
    native: bool = False  # py-spy --native: C/C++ code (a shared library, or a .c/.cpp file)


def _is_native(file: str) -> bool:
    return not (file.endswith((".py", ".pyw")) or file.startswith("<"))


@dataclass(frozen=True)
class ThreadStack:
    # py-spy: the OS thread id (the pid, for the main thread); faulthandler: the ident
    id: int | None
    name: str | None  # py-spy's thread name (faulthandler's, from Python 3.14)
    active: bool | None  # py-spy: running rather than idle; None when not known
    frames: tuple[Frame, ...]  # innermost first
    gil: bool = False  # py-spy: holds the GIL
    current: bool = False  # faulthandler: the thread that took the signal


def parse_pyspy_dump(text: str) -> list[ThreadStack]:
    """Threads of ``py-spy dump`` output (header lines, locals and anything else are skipped)."""
    threads: list[ThreadStack] = []
    frames: list[Frame] = []
    head: tuple[int, bool, bool, str | None] | None = None

    def close() -> None:
        if head is not None:
            ident, active, gil, name = head
            threads.append(ThreadStack(ident, name, active, tuple(frames), gil=gil))

    for raw in _ANSI.sub("", text).splitlines():
        line = raw.rstrip()
        if match := _PYSPY_THREAD.fullmatch(line):
            close()
            status = match.group(2)
            head = (int(match.group(1), 0), status.startswith("active"), "gil" in status,
                    match.group(3))
            frames = []
        elif head is not None and (match := _PYSPY_FRAME.fullmatch(line)):
            file = match.group(2)
            frames.append(Frame(match.group(1), file, int(match.group(3)), _is_native(file)))
        elif head is not None and (match := _PYSPY_NATIVE_FRAME.fullmatch(line)):
            file = match.group(2)
            frames.append(Frame(match.group(1), file, None, _is_native(file)))
    close()
    return threads


def parse_faulthandler(text: str) -> list[ThreadStack]:
    """Threads of faulthandler's traceback dump (``Thread 0x... (most recent call first):``)."""
    threads: list[ThreadStack] = []
    frames: list[Frame] = []
    head: tuple[int | None, str | None, bool] | None = None

    def close() -> None:
        if head is not None:
            threads.append(ThreadStack(head[0], head[1], None, tuple(frames), current=head[2]))

    for raw in text.splitlines():
        line = raw.rstrip()
        if match := _FH_THREAD.fullmatch(line):
            close()
            head = (int(match.group(2), 16), match.group(3), match.group(1) == "Current thread")
            frames = []
        elif line == _FH_STACK:
            close()
            head, frames = (None, None, True), []
        elif head is not None and (match := _FH_FRAME.fullmatch(line)):
            number = match.group(2)
            frames.append(Frame(match.group(3), match.group(1),
                                None if number == "???" else int(number)))
    close()
    return threads


__all__ = ["Frame", "ThreadStack", "parse_faulthandler", "parse_pyspy_dump"]
