"""``fsdp-orch events``: a job's event log, as lines a person reads
or as JSON lines (stdlib only)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from fsdp_orch.record.events import read_new
from fsdp_orch.vocab.redact import shown_event

_SHOWN = ("state", "attempt", "category", "action", "step", "loss", "loss_step", "delay",
          "backend_ref", "exit_code", "resume_from", "pid", "host", "off_because", "reason",
          "finished", "missing", "notice", "message", "evidence")


# A schedule's events (``fsdp-orch schedule events``).
SCHEDULE_SHOWN = ("tick", "job", "init_from", "cancelled", "replaced", "reason", "count", "first",
                  "last", "error", "cron", "tz", "cluster")


def format_event(event: dict[str, Any], shown: tuple[str, ...] = _SHOWN) -> str:
    """``2026-11-23T14:05:20Z  failure_detected  attempt=0 category=hang ...`` (pure)."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(event["at"])))
    fields = " ".join(f"{key}={event[key]}" for key in shown if event.get(key) not in (None, []))
    return f"{when}  {event['kind']:<20}  {fields}".rstrip()


def show_events(run_dir: str, *, as_json: bool, follow: bool, interval: float = 0.5,
                out: TextIO | None = None, err: TextIO | None = None,
                sleep: Callable[[float], None] = time.sleep) -> None:
    """Print the job's events in time order; with ``follow``, keep printing new ones until the job's
    ``finished`` event. ``out``, ``err``: sys.stdout and sys.stderr as they are at the call."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    offsets: dict[str, tuple[int, int]] = {}
    finished = False
    while True:
        events, warnings = read_new(run_dir, offsets)
        for text in warnings:
            print(f"fsdp-orch: warning: {text}", file=err)
        for event in events:
            out.write((json.dumps(shown_event(event)) if as_json else format_event(event)) + "\n")
            finished = finished or event["kind"] == "finished"
        out.flush()
        if not follow or finished:
            return
        sleep(interval)
