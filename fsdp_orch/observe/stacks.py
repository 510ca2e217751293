"""A hung rank's stacks, captured: every thread's Python stack, read from outside with py-spy (or,
where py-spy cannot attach, from the rank's own faulthandler), kept as raw text beside the attempt.

:func:`capture_stacks` is the one doing-function: the command runner, the signal and the clock are
injected. The parsers are in ``observe.stack_parse``, the choice of the user's frame in
``observe.user_frame``.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fsdp_orch.observe import command
from fsdp_orch.observe.attempt_files import faulthandler_dump_name, pyspy_dump_name
from fsdp_orch.observe.command import Runner
from fsdp_orch.observe.stack_parse import ThreadStack, parse_faulthandler, parse_pyspy_dump
from fsdp_orch.places.private import write_atomically

# Full paths: py-spy's default short names ("threading.py", "train.py") do not tell library
# code from the user's.
PYSPY_DUMP = ("dump", "--full-filenames")
# Native frames too: a rank stuck in one native call (a destructor joining a thread with the
# interpreter held) shows only its Python caller without them. 0.77 s against 0.06 s for a rank
# that has imported torch, measured here; taken only when a rank is judged, and py-spy without it
# where it fails.
PYSPY_NATIVE = "--native"


@dataclass(frozen=True)
class StackDump:
    rank: int
    pid: int
    threads: tuple[ThreadStack, ...] = ()
    source: str = ""  # "py-spy", "py-spy --nonblocking" or "faulthandler"; "" when none
    path: Path | None = None  # the raw text of this dump
    error: str = ""  # what failed on the way ("" when py-spy's first try worked)


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


__all__ = ["StackCapture", "StackDump", "capture_stacks", "pyspy_argv", "pyspy_binary",
           "pyspy_error"]
