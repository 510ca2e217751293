"""Where a hung rank is stuck: every thread's Python stack, read from outside with py-spy (or, where
py-spy cannot attach, from the rank's own faulthandler), and the innermost frame of user code.

The parsers and the frame choice are pure functions of text; real captured output is in
``tests/fixtures/stacks/``. :func:`capture_stacks` is the one doing-function: the command runner,
the signal and the clock are injected.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import sys
import sysconfig
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fsdp_orch.observe import command
from fsdp_orch.observe.attempt_files import faulthandler_dump_name, pyspy_dump_name
from fsdp_orch.observe.command import Runner
from fsdp_orch.places.private import write_atomically

# Full paths: py-spy's default short names ("threading.py", "train.py") do not tell library
# code from the user's.
PYSPY_DUMP = ("dump", "--full-filenames")
# Native frames too: a rank stuck in one native call (a destructor joining a thread with the
# interpreter held) shows only its Python caller without them. 0.77 s against 0.06 s for a rank
# that has imported torch, measured here; taken only when a rank is judged, and py-spy without it
# where it fails.
PYSPY_NATIVE = "--native"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PYSPY_THREAD = re.compile(r'Thread (0[xX][0-9a-fA-F]+|\d+) \(([a-z+]+)\)(?:: "(.*)")?')
_PYSPY_FRAME = re.compile(r" {4}(\S.*?) \((.+):(\d+)\)")
_PYSPY_NATIVE_FRAME = re.compile(r" {4}(\S.*) \(([^()]*)\)")  # no line: native or unknown
_FH_THREAD = re.compile(r"(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*)\])? "
                        r"\(most recent call first\):")
_FH_STACK = "Stack (most recent call first):"  # all_threads=False
_FH_FRAME = re.compile(r'  File "(.*)", line (\d+|\?\?\?) in (.*)')
# Installed packages and the standard library of whichever Python the rank runs, which may not
# be the supervisor's.
_PACKAGES = re.compile(r"/(?:site|dist)-packages/")
_STDLIB = re.compile(r"/lib(?:64)?/python\d[\d.]*t?/")
_TOP_LEVEL = frozenset({"<module>", "_run_module_as_main"})


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


@dataclass(frozen=True)
class StackDump:
    rank: int
    pid: int
    threads: tuple[ThreadStack, ...] = ()
    source: str = ""  # "py-spy", "py-spy --nonblocking" or "faulthandler"; "" when none
    path: Path | None = None  # the raw text of this dump
    error: str = ""  # what failed on the way ("" when py-spy's first try worked)


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


def default_library_roots() -> tuple[str, ...]:
    """This Python's standard library and package folders, and fsdp-orch's own package."""
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    roots.add(str(Path(__file__).absolute().parents[1]))  # fsdp_orch/
    return tuple(sorted(os.path.normpath(root) for root in roots))


def _root_of(file: str, library_roots: Iterable[str]) -> str | None:
    path = os.path.normpath(file)
    under = [r for r in library_roots if path.startswith(os.path.normpath(r).rstrip("/") + "/")]
    return max(under, key=len) if under else None


@functools.cache
def _own_top_level() -> frozenset[str]:
    """The names directly in fsdp-orch's package: its subpackages and modules."""
    package = Path(__file__).absolute().parents[1]
    return frozenset(p.name for p in package.iterdir()
                     if p.suffix == ".py" or (p / "__init__.py").exists())


def is_own_file(file: str) -> bool:
    """Whether a frame's file is fsdp-orch's own (the standby keeper, the bootstrap, the runtime),
    wherever that copy of fsdp-orch is: an SSH host's copy in the run folder, another checkout or
    environment on the nodes. A path with a ``fsdp_orch/`` folder followed by one of this package's
    subpackages or modules (``.../fsdp_orch/standby/keeper.py``)."""
    return _own_tail(file) is not None


def _own_tail(file: str) -> str | None:
    """The path of an fsdp-orch file inside its package (``standby/keeper.py``), else None."""
    parts = os.path.normpath(file).split("/")
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "fsdp_orch" and parts[i + 1] in _own_top_level():
            return "/".join(parts[i + 1:])
    return None


def is_library_file(file: str, library_roots: Iterable[str]) -> bool:
    """Whether a frame's file is not user code: under a root, in any Python's packages or
    standard library, fsdp-orch's own wherever it is (:func:`is_own_file`), or not a file
    (``<frozen runpy>``, ``<string>``)."""
    return (file.startswith("<") or any(p.search(file) for p in (_PACKAGES, _STDLIB))
            or _root_of(file, library_roots) is not None or is_own_file(file))


def main_thread(threads: Sequence[ThreadStack],
                main_thread_id: int | None = None) -> ThreadStack | None:
    """The main thread: the one with ``main_thread_id``, else the one named ``MainThread``, else
    the one whose outermost frame is a script's top level, else the thread that took the signal.
    (faulthandler's "Current thread" is whichever thread the kernel
    chose, often not the main one.)"""
    tests: list[Callable[[ThreadStack], bool]] = [
        lambda t: main_thread_id is not None and t.id == main_thread_id,
        lambda t: t.name == "MainThread",
        lambda t: bool(t.frames) and t.frames[-1].function in _TOP_LEVEL,
        lambda t: t.current,
    ]
    for test in tests:
        found = [t for t in threads if test(t)]
        if found:
            return found[0]
    return threads[0] if len(threads) == 1 else None


def innermost_user_frame(threads: Sequence[ThreadStack], library_roots: Iterable[str],
                         main_thread_id: int | None = None) -> Frame | None:
    """The main thread's innermost frame of user code (a real file and line outside the library
    roots), or None."""
    main = main_thread(threads, main_thread_id)
    return None if main is None else _first_user_frame(main.frames, tuple(library_roots))


def _first_user_frame(frames: Iterable[Frame], library_roots: tuple[str, ...]) -> Frame | None:
    return next((f for f in frames if f.line is not None and not f.native
                 and not is_library_file(f.file, library_roots)), None)


def python_frames(thread: ThreadStack) -> list[Frame]:
    """The thread's Python frames, innermost first (no native ones)."""
    return [f for f in thread.frames if not f.native]


def native_top(thread: ThreadStack, most: int = 4) -> list[str]:
    """The names of the native frames inside the thread's innermost Python frame, innermost first
    (``pause``, ``ffi_call``, ...), bare addresses left out: what a native call is stuck in."""
    names: list[str] = []
    for frame in thread.frames:
        if not frame.native:
            break
        if not frame.function.startswith("0x"):
            names.append(short_symbol(frame.function))
    return names[:most]


def short_symbol(name: str, longest: int = 80) -> str:
    """A C++ symbol as a line of evidence can carry it: template arguments and parameter lists
    folded to ``<…>`` and ``(…)`` (pybind11's were over a thousand characters), at most
    ``longest`` characters. The stack dump keeps the whole name."""
    operators = ("operator<<", "operator>>", "operator<", "operator>", "operator()")
    kept = {op: f"\x00{n}\x00" for n, op in enumerate(operators)}
    for op, mark in kept.items():
        name = name.replace(op, mark)
    out, depth = [], 0
    for char in name:
        if char in "<(":
            if depth == 0:
                out.append(char + "…")
            depth += 1
        elif char in ">)" and depth:
            depth -= 1
            if depth == 0:
                out.append(char)
        elif depth == 0:
            out.append(char)
    short = "".join(out)
    for op, mark in kept.items():
        short = short.replace(mark, op)
    return short if len(short) <= longest else short[:longest - 1] + "…"


def display_path(file: str, library_roots: Iterable[str]) -> str:
    """How evidence names a file: user code by its base name (the user knows their files, and the
    evidence is one line; the raw dump has full paths),
    library code as ``.../package/module.py``."""
    if file.startswith("<"):
        return file
    for pattern in (_PACKAGES, _STDLIB):
        if found := list(pattern.finditer(file)):
            return ".../" + file[found[-1].end():]
    root = _root_of(file, library_roots)
    if root is not None:
        return ".../" + os.path.relpath(os.path.normpath(file), os.path.normpath(root))
    own = _own_tail(file)
    return os.path.basename(file) if own is None else f".../{own}"


def _where(frame: Frame, library_roots: Iterable[str]) -> str:
    line = "" if frame.line is None else f":{frame.line}"
    return f"{display_path(frame.file, library_roots)}{line}"


def describe_stuck(rank: int, threads: Sequence[ThreadStack], library_roots: Iterable[str],
                   main_thread_id: int | None = None) -> str:
    """One line for a failure's evidence, e.g. ``rank 1 stuck at train.py:57 in main
    (innermost: all_reduce at .../torch/distributed/distributed_c10d.py:3252)``."""
    roots = tuple(library_roots)
    main = main_thread(threads, main_thread_id)
    if main is None:
        return f"rank {rank}: no main thread among the {len(threads)} threads of its stack dump"
    if not main.frames:
        return f"rank {rank}: its main thread shows no Python frames"
    native = native_top(main)
    in_native = f"; native: {' < '.join(native)}" if native else ""
    python = python_frames(main)
    if not python:
        return f"rank {rank}: its main thread shows no Python frames{in_native}"
    innermost = python[0]
    user = _first_user_frame(python, roots)
    inner = f"{innermost.function} at {_where(innermost, roots)}"
    if user is None:
        return (f"rank {rank} stuck in {inner} (no frame of user code on its main thread"
                f"{in_native})")
    text = f"rank {rank} stuck at {_where(user, roots)} in {user.function}"
    if user is innermost:
        return f"{text} ({in_native[2:]})" if native else text
    return f"{text} (innermost: {inner}{in_native})"


def pyspy_binary() -> str:
    """py-spy beside this Python (the venv's bin, where pip puts it), else the one on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy") or "py-spy"


def pyspy_error(returncode: int, stderr: str) -> str:
    """py-spy's complaint in one line: its first paragraph and first cause, without the Rust
    backtrace (RUST_BACKTRACE) that follows."""
    text = stderr.split("Stack backtrace:")[0]
    head, _, causes = text.partition("Caused by:")
    summary = " ".join(head.split("\n\n")[0].split()).removeprefix("Error: ")[:300]
    if cause := re.search(r"^\s*0: (.+)$", causes, re.MULTILINE):
        summary += f" ({cause.group(1).strip()})"
    summary = summary or f"exit status {returncode}"
    if "permission denied" in summary.lower():  # py-spy's own advice is to rerun it with sudo
        summary = ("Permission Denied: attaching needs CAP_SYS_PTRACE, or the ranks' user with "
                   "kernel.yama.ptrace_scope 0 (1 when they descend from the supervisor)")
    return f"py-spy: {summary}"


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _faulthandler_dump(pid: int, path: Path, send: Callable[[int, int], None],
                       sleep: Callable[[float], None], clock: Callable[[], float],
                       wait: float) -> tuple[list[ThreadStack], str]:
    """Ask the rank's own faulthandler (SIGUSR1) for its stacks; (threads, error)."""
    if not path.exists():  # no handler registered: SIGUSR1 would kill the rank (or mean else)
        return [], f"no {path.name}: the rank registered no faulthandler to ask"
    offset = path.stat().st_size  # an earlier dump of the same attempt stays before this one
    try:
        send(pid, signal.SIGUSR1)
    except OSError as exc:
        return [], f"SIGUSR1 to pid {pid}: {exc.strerror or exc}"
    deadline = clock() + wait
    previous = None
    while True:
        text = _read_from(path, offset)
        threads = parse_faulthandler(text)
        if threads and text == previous:
            return threads, ""
        if clock() >= deadline:
            return (threads, "" if threads
                    else f"no faulthandler dump in {path.name} after {wait:g}s")
        previous = text
        sleep(0.1)


def pyspy_argv(binary: str, pid: int, *, nonblocking: bool = False,
               native: bool = False) -> list[str]:
    """``py-spy dump`` with full file names; ``nonblocking`` reads without pausing the process
    (no native frames then: py-spy unwinds those only in a paused one)."""
    return [binary, *PYSPY_DUMP, *(["--nonblocking"] if nonblocking else []),
            *([PYSPY_NATIVE] if native and not nonblocking else []), "--pid", str(pid)]


# (nonblocking, native), in the order tried
_PYSPY_TRIES = ((False, True), (False, False), (True, False))


def _pyspy_dump(run: Runner, binary: str, pid: int, timeout: float,
                path: Path) -> tuple[list[ThreadStack], str, str]:
    """(threads, source, error). With native frames where py-spy can unwind them, else without. A
    process py-spy cannot pause (stopped, or stuck in the kernel) can still be read without pausing
    it, at the risk of a torn stack."""
    error = ""
    for nonblocking, native in _PYSPY_TRIES:
        returncode, stdout, stderr = run(
            pyspy_argv(binary, pid, nonblocking=nonblocking, native=native), timeout)
        threads = parse_pyspy_dump(stdout) if returncode == 0 else []
        if threads:
            write_atomically(path, stdout)
            source = ("py-spy --nonblocking" if nonblocking
                      else "py-spy --native" if native else "py-spy")
            return threads, source, error
        error = error or (pyspy_error(returncode, stderr) if returncode
                          else "py-spy: no Python threads")
        if returncode == 127:  # no py-spy
            break
    return [], "", error


def _capture_rank(rank: int, pid: int, out_dir: Path, run: Runner, timeout: float,
                  send: Callable[[int, int], None], sleep: Callable[[float], None],
                  clock: Callable[[], float], faulthandler_wait: float) -> StackDump:
    raw = out_dir / pyspy_dump_name(rank)
    threads, source, error = _pyspy_dump(run, pyspy_binary(), pid, timeout, raw)
    if threads:
        return StackDump(rank, pid, tuple(threads), source, raw, error)
    path = out_dir / faulthandler_dump_name(rank)
    threads, fallback = _faulthandler_dump(pid, path, send, sleep, clock, faulthandler_wait)
    if threads:
        return StackDump(rank, pid, tuple(threads), "faulthandler", path, error)
    return StackDump(rank, pid, (), "", None, f"{error}; {fallback}")


@dataclass(frozen=True)
class StackCapture:
    """What an attempt's handle could dump: stacks by rank, the folder they were kept in, and why
    ranks are missing (``note``: no rank on a host it can reach)."""

    dumps: dict[int, StackDump]
    folder: str | None
    note: str = ""


def capture_stacks(pids: dict[int, int], out_dir: Path, *, run: Runner | None = None,
                   timeout: float = 10.0, send: Callable[[int, int], None] = os.kill,
                   sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.monotonic,
                   faulthandler_wait: float = 5.0) -> dict[int, StackDump]:
    """Dump every rank's stacks (``pids``: rank -> pid) with py-spy into ``out_dir/rank-<R>.txt``;
    where py-spy fails, send SIGUSR1 to a rank that registered faulthandler on its
    ``rank-<R>.faulthandler.txt`` there and read that. Ranks in
    parallel, ``timeout`` per command."""
    out_dir.mkdir(parents=True, exist_ok=True)
    one = functools.partial(_capture_rank, out_dir=out_dir, run=run or command.run, timeout=timeout,
                            send=send, sleep=sleep, clock=clock,
                            faulthandler_wait=faulthandler_wait)
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(pids)))) as pool:
        futures = {rank: pool.submit(one, rank, pid) for rank, pid in pids.items()}
    return {rank: futures[rank].result() for rank in sorted(futures)}


__all__ = ["Frame", "StackCapture", "StackDump", "ThreadStack", "capture_stacks",
           "default_library_roots", "describe_stuck", "display_path", "innermost_user_frame",
           "is_library_file", "is_own_file", "main_thread", "native_top", "parse_faulthandler",
           "parse_pyspy_dump", "pyspy_argv", "pyspy_binary", "pyspy_error", "python_frames"]
