"""torchrun's failure summary, read line by line: its "Root Cause (first observed failure)" block
names the rank that failed first; its "Failures:" list names the ranks that failed after it."""

from __future__ import annotations

import re
from collections.abc import Iterable

ROOT_CAUSE = "Root Cause (first observed failure):"
_SUMMARY_FIELD = re.compile(r"^\s*(rank|exitcode)\s*:\s*(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?")


class FailuresList:
    """Where a stream of stripped lines is in torchrun's summary: :meth:`note` is True inside its
    "Failures:" list, the ranks that failed after the first (the ones torchrun stopped itself, by
    SIGTERM or SIGKILL, among them): only its "Root Cause" block, which follows, names a cause."""

    def __init__(self) -> None:
        self.inside = False

    def note(self, line: str) -> bool:
        """Follows ``line``; True while inside the "Failures:" list."""
        if line == "Failures:":
            self.inside = True
        elif line.startswith((ROOT_CAUSE, "===")):
            self.inside = False
        return self.inside


def torchrun_root_cause(lines: Iterable[str]) -> tuple[int, int, int] | None:
    """(global rank, local rank, exit code) of torchrun's "Root Cause
    (first observed failure)" block."""
    rank: int | None = None
    local = 0
    inside = False
    for raw in lines:
        line = raw.rstrip()
        if ROOT_CAUSE in line:
            inside, rank = True, None
            continue
        if not inside:
            continue
        m = _SUMMARY_FIELD.match(line)
        if m and m.group(1) == "rank":
            rank = int(m.group(2))
            local = int(m.group(3)) if m.group(3) is not None else rank
        elif m and rank is not None:
            return rank, local, int(m.group(2))
        elif line.startswith("==="):
            inside = False
    return None


__all__ = ["ROOT_CAUSE", "FailuresList", "torchrun_root_cause"]
