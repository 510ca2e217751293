"""Where in its stacks a hung rank is stuck: its main thread, the innermost frame of user code
(library code told apart by where its file is), and the one line of evidence that says so. Pure
functions of the parsed stacks (``observe.stack_parse``)."""

from __future__ import annotations

import functools
import os
import re
import sysconfig
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from fsdp_orch.observe.stack_parse import Frame, ThreadStack

# Installed packages and the standard library of whichever Python the rank runs, which may not
# be the supervisor's.
_PACKAGES = re.compile(r"/(?:site|dist)-packages/")
_STDLIB = re.compile(r"/lib(?:64)?/python\d[\d.]*t?/")
_TOP_LEVEL = frozenset({"<module>", "_run_module_as_main"})



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


__all__ = ["default_library_roots", "describe_stuck", "display_path", "innermost_user_frame",
           "is_library_file", "is_own_file", "main_thread", "native_top", "python_frames",
           "short_symbol"]
