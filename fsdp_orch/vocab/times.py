"""How fsdp-orch writes a moment: UTC, ISO 8601, milliseconds (``2026-11-25T06:19:56.123Z``), in the
status JSON, the notifications and the event lines alike. Stdlib only (``status`` starts here)."""

from __future__ import annotations

import time


def iso_time(at: float | None) -> str | None:
    """``at`` (seconds since the epoch) to the nearest millisecond; None stays None."""
    if at is None:
        return None
    millis = int(round(float(at) * 1000))
    seconds, ms = divmod(millis, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ms:03d}Z"
