"""A rank's latest step, written by its main thread at the step itself: ``rank-<R>.step`` beside
its heartbeat file ``rank-<R>.json``. Torch-free.

The heartbeat file is rewritten at most every ``STEP_WRITE_MIN_S`` from the step hook, and
otherwise by the bootstrap's watcher thread, which needs the interpreter. A rank that stops in a
native call holding the interpreter right after its last step (``~ProcessGroupGloo`` joining a
thread as ``main()`` returns) keeps a file one step or more behind: TRL's ``sft.py`` took its 30th
and last step, its heartbeat said 29, and the stuck rank was judged hung and trained again (the
clean-clone CI of 1787c8d). The mark is one ``pwrite`` of a few bytes at each step left
unwritten (a few microseconds), so the step is on disk before the script can go on.

Format: ``<step> <unix time> <step>\\n`` at offset 0, fixed width. The step is written twice: a
read that raced a write (no lock between them) sees the two differ, and is ignored.
"""

from __future__ import annotations

import os
from typing import Any

from fsdp_orch.vocab.states import HeartbeatState

_WIDTH = 20


def step_mark_path(beat_path: str) -> str:
    """``.../rank-R.step`` for the heartbeat file ``.../rank-R.json``."""
    root, _ = os.path.splitext(beat_path)
    return root + ".step"


def encode_step_mark(step: int, at: float) -> bytes:
    return f"{step:>{_WIDTH}d} {at:>{_WIDTH}.6f} {step:>{_WIDTH}d}\n".encode()


def decode_step_mark(raw: bytes) -> tuple[int, float] | None:
    """(step, time) of a whole mark; None for a torn, empty or foreign one."""
    parts = raw.split()
    if len(parts) != 3 or parts[0] != parts[2]:
        return None
    try:
        step, at = int(parts[0]), float(parts[1])
    except ValueError:
        return None
    return (step, at) if step >= 0 else None


class StepMark:
    """The main thread's writer: one open descriptor, one ``pwrite`` a step."""

    def __init__(self, beat_path: str) -> None:
        self._fd = os.open(step_mark_path(beat_path), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC,
                           0o600)

    def mark(self, step: int, at: float) -> None:
        try:
            os.pwrite(self._fd, encode_step_mark(step, at), 0)
        except OSError:
            pass  # a full or vanished folder must not break training


def with_step_mark(beat: dict[str, Any], beat_path: str) -> dict[str, Any]:
    """The decoded heartbeat ``beat`` of ``beat_path``, with the step of its mark where the mark is
    newer than the file's progress (then the rank is training at that step); ``beat`` itself
    otherwise. ``time`` stays the file's: a held rank still looks held."""
    if beat.get("state") == HeartbeatState.DONE:
        return beat
    try:
        with open(step_mark_path(beat_path), "rb") as f:
            mark = decode_step_mark(f.read(4 * _WIDTH))
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
