"""A rank's latest step, written by its main thread at the step itself: ``rank-<R>.step`` beside
its heartbeat file ``rank-<R>.json``. Torch-free.

The heartbeat file is rewritten by the bootstrap's watcher thread every tick (0.5 s), which needs
the interpreter; the main thread rewrites it at a few changes of state (and at each step a script
reports through ``fsdp_orch.runtime``), never at an optimizer step. A rank that stops in a native
call holding the interpreter right after its last step (``~ProcessGroupGloo`` joining a thread as
``main()`` returns) would keep a file one step or more behind: TRL's ``sft.py`` took its 30th and
last step, its heartbeat said 29, and the stuck rank was judged hung and trained again (the
clean-clone CI of 1787c8d). So every step is marked as it is taken, before the script can go on.

A mark costs the step what the step hook touches, cold: the step has just swept the caches. In a
``Linear(1024, 1024)`` step (1.7 ms on a quiet machine; bench/bootstrap_cost.py, issue 64) a
``pwrite`` took 28 us there and formatting the mark as text 21 us. So the file's page is mapped into
the rank (``MAP_SHARED``: every reader of the file on the node sees a store at once, and the page
stays in the cache if the process is killed or hangs), and a mark is three stores of 8 bytes
through ``memoryview`` casts, no formatting, no system call (5 us in the step). Where the file
cannot be mapped, one ``pwrite``.

Format: 32 bytes, native byte order (``_LAYOUT``): a magic number (``_MAGIC``: a host of the other
byte order reads another one), the step, the unix time of the step (a double), the step again. The
step is written before the time and again after it: a read that raced a write (no lock between
them) sees the two differ, and is ignored. A mark of an earlier version (text: ``<step> <unix
time> <step>\\n``, fixed width) still reads.
"""

from __future__ import annotations

import math
import os
import struct
from typing import Any

from fsdp_orch.vocab.states import HeartbeatState

_LAYOUT = struct.Struct("=qqdq")  # magic, step, time, step
_SIZE = _LAYOUT.size  # 32
_MAGIC = 0x314B52414D505453  # b"STPMARK1" in little-endian
_MAGIC_BYTES = _LAYOUT.pack(_MAGIC, 0, 0.0, 0)[:8]
_BLANK = _LAYOUT.pack(_MAGIC, -1, 0.0, -2)  # no mark yet: the two steps differ
_READ = 80  # bytes read: an earlier version's text mark is 63


def step_mark_path(beat_path: str) -> str:
    """``.../rank-R.step`` for the heartbeat file ``.../rank-R.json``."""
    root, _ = os.path.splitext(beat_path)
    return root + ".step"


def encode_step_mark(step: int, at: float) -> bytes:
    return _LAYOUT.pack(_MAGIC, step, at, step)


def decode_step_mark(raw: bytes) -> tuple[int, float] | None:
    """(step, time) of a whole mark; None for a torn, empty or foreign one."""
    if raw[:8] == _MAGIC_BYTES and len(raw) >= _SIZE:
        _, step, at, again = _LAYOUT.unpack_from(raw)
        if step != again or step < 0 or not math.isfinite(at):
            return None
        return step, at
    return _decode_text(raw)


def _decode_text(raw: bytes) -> tuple[int, float] | None:
    """An earlier version's mark: ``<step> <unix time> <step>``."""
    parts = raw.split()
    if len(parts) != 3 or parts[0] != parts[2]:
        return None
    try:
        step, at = int(parts[0]), float(parts[1])
    except ValueError:
        return None
    return (step, at) if step >= 0 and math.isfinite(at) else None


class StepMark:
    """The main thread's writer: the file's page mapped, three stores a step (:meth:`mark`).

    The file is written whole once with ``pwrite`` before it is mapped, so that its block is
    allocated (or reserved) then: a later store needs no space a full disk could refuse. Raises
    OSError where the file cannot be made."""

    def __init__(self, beat_path: str) -> None:
        fd = os.open(step_mark_path(beat_path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._fd = fd
        self._steps: Any = None  # the page as 8-byte integers, and as doubles
        self._times: Any = None
        try:
            if os.pwrite(fd, _BLANK, 0) != _SIZE:
                raise OSError("short write")
            os.ftruncate(fd, _SIZE)  # a longer file left by an earlier writer
            import mmap

            page = mmap.mmap(fd, _SIZE)  # MAP_SHARED, read and write
            self._steps, self._times = memoryview(page).cast("q"), memoryview(page).cast("d")
        except (OSError, ValueError, ImportError):
            self._steps = self._times = None  # not mapped here: one pwrite a step instead
        else:
            os.close(fd)
            self._fd = -1

    def mark(self, step: int, at: float) -> None:
        """``step`` taken at ``at``: visible to the file's readers on return."""
        steps = self._steps
        if steps is None:
            self._write(step, at)
            return
        try:
            steps[1] = step
            self._times[2] = at
            steps[3] = step
        except (TypeError, ValueError, OverflowError):
            self._write(step, at)  # not an int and a float (a test's clock): packed instead

    def _write(self, step: int, at: float) -> None:
        try:
            raw = _LAYOUT.pack(_MAGIC, step, float(at), step)
            if self._steps is not None:
                self._steps[:] = memoryview(raw).cast("q")
            else:
                os.pwrite(self._fd, raw, 0)
        except (OSError, ValueError, TypeError, OverflowError, struct.error):
            pass  # a full or vanished folder, a step out of range: never a broken training step


def with_step_mark(beat: dict[str, Any], beat_path: str) -> dict[str, Any]:
    """The decoded heartbeat ``beat`` of ``beat_path``, with the step of its mark where the mark is
    newer than the file's progress (then the rank is training at that step); ``beat`` itself
    otherwise. ``time`` stays the file's: a held rank still looks held."""
    if beat.get("state") == HeartbeatState.DONE:
        return beat
    try:
        with open(step_mark_path(beat_path), "rb") as f:
            mark = decode_step_mark(f.read(_READ))
    except OSError:
        return beat
    if mark is None:
        return beat
    step, at = mark
    progress: Any = beat.get("progress_at", beat.get("time"))  # decoded JSON
    old_step = beat.get("step")
    if (type(old_step) is not int or step <= old_step
            or type(progress) not in (int, float) or at <= progress):
        return beat
    return {**beat, "step": step, "progress_at": at, "state": "training"}


__all__ = ["StepMark", "decode_step_mark", "encode_step_mark", "step_mark_path",
           "with_step_mark"]
