"""Why the hang rule holds its verdict back on the running attempt, in one small file of the run
folder (``hang_hold.json``, replaced in place), for ``status``: a rank is past its window but a
rule holds the verdict (no heartbeat from a rank: to the ceiling; a rank in a save that writes: not
judged; a frozen rank: until its threshold; a silent node: until heard again or lost).

The supervisor writes it when the rule or its subject changes (``decide.watchdog.Hold``, as
``to_json``), at most every ``HOLD_EVERY_S`` while only its deadline moves, and ``null`` once
nothing is held; ``status`` folds it into the running attempt's status at each read
(``live_progress.apply_live``), never into the event log.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from fsdp_orch.places.private import write_atomically

HOLD_FILE = "hang_hold.json"
HOLD_EVERY_S = 5.0  # a deadline that moves (a rank busy in Python, a save writing): rewritten so


def write_hold(run_dir: str, attempt: int, hold: dict[str, Any] | None) -> None:
    """The attempt's hold now (``None``: none); a failed write only costs ``status`` its reason."""
    try:
        write_atomically(os.path.join(run_dir, HOLD_FILE),
                         json.dumps({"attempt": attempt, "hold": hold}), mode=0o600)
    except OSError:
        pass


def read_hold(run_dir: str) -> dict[str, Any] | None:
    """``{"attempt", "hold"}`` when the file is well formed, else None."""
    try:
        with open(os.path.join(run_dir, HOLD_FILE), encoding="utf-8") as f:
            data = json.loads(f.read(4096))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or type(data.get("attempt")) is not int:
        return None
    return data


def _clock(at: Any) -> str | None:
    if not isinstance(at, (int, float)) or not math.isfinite(at):
        return None
    return time.strftime("%H:%M:%SZ", time.gmtime(at))


def hold_text(data: dict[str, Any] | None, attempt: int) -> str | None:
    """The hold of ``attempt`` in words, e.g. ``no heartbeat from rank 1 since 12:03:04Z: held to
    the 300s ceiling (watch.heartbeat_timeout) (no signal is not hung: ...); no verdict before
    12:08:04Z``; None when ``data`` holds none for it."""
    if data is None or data.get("attempt") != attempt or not isinstance(data.get("hold"), dict):
        return None
    hold = data["hold"]
    words = [hold.get(k) for k in ("subject", "rule_text", "why")]
    if not all(isinstance(w, str) for w in words):
        return None
    subject, rule, why = words
    since, until = _clock(hold.get("since")), _clock(hold.get("until"))
    text = f"{subject}{f' since {since}' if since else ''}: {rule} ({why})"
    return f"{text}; no verdict before {until}" if until else text


__all__ = ["HOLD_EVERY_S", "HOLD_FILE", "hold_text", "read_hold", "write_hold"]
