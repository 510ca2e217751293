"""What the runtime tells the job's event log itself: a notice, written by rank 0 into an event file
of its own (``runs/<id>/events/runtime-*.jsonl``, one writer per file as every writer of the log
has), so that ``fsdp-orch events`` and ``status`` show it. Only where the run folder is the
supervisor's (its events folder exists): on a host with a disk of its own the log line alone says
it. Torch-free."""

from __future__ import annotations

import os
from pathlib import Path

from fsdp_orch.record.events import EventWriter, events_dir
from fsdp_orch.record.journal import Journal

RUNTIME_ROLE = "runtime"


class RuntimeNotices:
    """Rank 0's notices to the event log; a no-op elsewhere, or without a run folder."""

    def __init__(self, run_dir: Path | None, job_id: str | None, attempt: int, rank: int):
        self.attempt = attempt
        self._target = (run_dir, job_id) if (rank == 0 and run_dir is not None and job_id) else None
        self._journal: Journal | None = None

    def notice(self, kind: str, message: str) -> bool:
        """Record a notice called ``kind``; False when it was not recorded (not rank 0, no run
        folder, or the events folder cannot be written: the caller's log line says it anyway)."""
        if self._target is None:
            return False
        run_dir, job_id = self._target
        try:
            if self._journal is None:
                if not os.path.isdir(events_dir(run_dir)):
                    return False
                self._journal = Journal(EventWriter(run_dir, RUNTIME_ROLE), str(job_id))
            self._journal.add_event(attempt=self.attempt, kind=kind, message=message)
        except OSError:
            return False
        return True


__all__ = ["RUNTIME_ROLE", "RuntimeNotices"]
