"""A job whose submission event cannot be read (its ``submit-*.jsonl`` emptied or damaged) while
its run folder still says what it is (``submission.json``) and its other writers (the supervisor)
left events: without this, ``status`` and ``cancel`` answered "no job with id" while its supervisor
kept running. Listed as BROKEN, naming the damaged file, and it can be cancelled. Stdlib only."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from fsdp_orch.vocab.states import JobState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsdp_orch.record.status import JobStatus

SETTLED_S = 5.0  # a submit writes submission.json, then its event, within this


def submitted_line(job_id: str, run_dir: str, lines: list[dict[str, Any]],
                   now: float | None = None) -> tuple[dict[str, Any], str] | None:
    """The submission event to fold the job from, made from its ``submission.json``, and which
    file was damaged; None while a submit may still be writing, or when there is nothing to go
    on (no other event, no readable submission)."""
    if not lines:
        return None
    events = os.path.join(run_dir, "events")
    try:
        names = sorted(os.listdir(events))
        with open(os.path.join(run_dir, "submission.json"), encoding="utf-8") as f:
            data = json.load(f)
        newest = max([os.stat(os.path.join(run_dir, "submission.json")).st_mtime]
                     + [os.stat(os.path.join(events, n)).st_mtime for n in names
                        if n.startswith("submit-")])
        name, cluster = str(data["job"]["name"]), str(data["cluster"])
        kind = str(data["profile"]["kind"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if (now if now is not None else time.time()) - newest < SETTLED_S:
        return None
    submits = [os.path.join(events, n) for n in names if n.startswith("submit-")]
    damaged = submits[0] if submits else os.path.join(events, "submit-*.jsonl (missing)")
    first = min(float(line.get("at", 0.0)) for line in lines)
    return ({"kind": "submitted", "job": job_id, "at": first, "seq": 0, "name": name,
             "cluster": cluster, "cluster_kind": kind, "run_dir": run_dir}, damaged)


def mark_broken(status: JobStatus, damaged: str) -> JobStatus:
    """BROKEN (unless it ended), with a reason that names the damaged file and what to do."""
    if not status.ended:
        status.state = JobState.BROKEN.value
        status.reason = (f"its submission event file {damaged} is empty or damaged: what is shown "
                         "is rebuilt from its run folder; it can still be cancelled "
                         f"(fsdp-orch cancel {status.id})")
    return status


__all__ = ["SETTLED_S", "mark_broken", "submitted_line"]
