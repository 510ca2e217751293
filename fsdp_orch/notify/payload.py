"""What a webhook receives: the job's status JSON (as ``fsdp-orch status ID --json`` prints it)
with the notification it is for, or a Slack-style ``{"text": ...}``. Pure."""

from __future__ import annotations

import json
import time
from typing import Any

from fsdp_orch.notify.due import Due


def body(due: Due, status: dict[str, Any], fmt: str) -> bytes:
    job = status.get("id") or due.event.get("job")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(due.at))
    if fmt == "slack":
        text = f"fsdp-orch: job {status.get('name', '')} ({job}) {due.trigger} at {when}"
        detail = due.event.get("reason") or due.event.get("evidence") or due.event.get("category")
        if detail:
            text += f": {detail}"
        return json.dumps({"text": text}).encode()
    note = {"job": job, "trigger": due.trigger, "at": when}
    return json.dumps({**status, "notification": note}).encode()


__all__ = ["body"]
