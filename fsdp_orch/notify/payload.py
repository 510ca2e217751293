"""What a webhook receives: the job's status JSON (as ``fsdp-orch status ID --json`` prints it)
with the notification it is for, or a Slack-style ``{"text": ...}``. Pure."""

from __future__ import annotations

import json
from typing import Any

from fsdp_orch.notify.due import Due
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.times import iso_time


def notification(due: Due, job: str | None) -> dict[str, Any]:
    """Which change a POST is for; the status beside it may have moved on since."""
    what = "state" if due.change.is_state else "event"
    return {"job": job, what: due.trigger, "trigger": due.trigger, "at": iso_time(due.at)}


def body(due: Due, job_status: JobStatus | None, fmt: str) -> bytes:
    """``job_status``: the job as its events fold now (None before its submission is readable)."""
    status = job_status.to_json() if job_status is not None else {}
    job = status.get("id") or due.event.get("job")
    if fmt == "slack":
        text = (f"fsdp-orch: job {status.get('name', '')} ({job}) "
                f"{due.trigger} at {iso_time(due.at)}")
        detail = due.event.get("reason") or due.event.get("evidence") or due.event.get("category")
        if detail:
            text += f": {detail}"
        return json.dumps({"text": text}).encode()
    return json.dumps({**status, "notification": notification(due, job)}).encode()


__all__ = ["body", "notification"]
