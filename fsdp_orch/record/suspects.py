"""The notices that say a job's training went wrong in a way its end state does not: a checkpoint
set aside as suspect, a NaN/inf loss or grad norm, a loss that jumped after a resume
(``checkpoints.suspect``). A job can end SUCCEEDED after them (it resumed from an earlier
checkpoint), so ``status ID`` and the report put them first."""

from __future__ import annotations

from fsdp_orch.checkpoints.resume import SUSPECT
from fsdp_orch.record.status import JobNotice, JobStatus
from fsdp_orch.vocab.categories import FailureCategory

HEALTH_NOTICES = (SUSPECT, FailureCategory.NONFINITE_LOSS.value, FailureCategory.LOSS_JUMP.value)
SHOWN = 6  # the latest this many, in status's first lines


def health_notices(job: JobStatus) -> list[JobNotice]:
    """The job's notices of suspect checkpoints and losses gone wrong, in order."""
    return [n for n in job.notices if n.kind in HEALTH_NOTICES]


def health_lines(job: JobStatus) -> list[str]:
    """``status ID``'s first lines under the table: each such notice (the latest ``SHOWN``)."""
    # the checkpoints set aside first: what the next attempts resumed from depends on them
    found = sorted(health_notices(job), key=lambda n: n.kind != SUSPECT)
    lines = [f"attention: attempt {n.attempt}: {n.kind}: {n.message}" for n in found[-SHOWN:]]
    if len(found) > SHOWN:
        lines.insert(0, f"attention: {len(found) - SHOWN} earlier such notice(s) below")
    return lines


__all__ = ["HEALTH_NOTICES", "health_lines", "health_notices"]
