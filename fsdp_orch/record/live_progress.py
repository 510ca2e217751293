"""The running attempt's step as the supervisor last saw it, in one small file of the run folder
(``progress.json``, replaced in place), for ``status`` and ``submit --wait``.

Progress events go to the job's event log at most one per ``PROGRESS_EVERY_S`` (5 s): a line a
second for days would grow the log, and with it every fold of it. Between them, status read a step
up to 5 s old (65 steps of the demo) and called a stepping job stalled. The supervisor now replaces
this file as rank 0's step changes (at most every ``LIVE_EVERY_S``), and the index folds it into the
running job's status at each read, never into its event log.
"""

from __future__ import annotations

import math
import os

TYPE_CHECKING = False  # status --json starts here: the record model and json are imported on use
if TYPE_CHECKING:
    from fsdp_orch.record.status import JobStatus

LIVE_FILE = "progress.json"
LIVE_EVERY_S = 0.5
QUIET_STATES = ("saving", "finishing")


def write_live(run_dir: str, *, attempt: int, step: int, loss: float | None,
               loss_source: str | None, progress_at: float, quiet: str | None = None,
               active_at: float | None = None, loss_step: int | None = None) -> None:
    """The supervisor's view of the attempt's progress now; a failed write only costs freshness.
    ``quiet``: why no step comes and none is due (QUIET_STATES); ``active_at``: the last progress
    of any rank (a step or a change of state); ``loss_step``: the step the loss belongs to."""
    import json

    from fsdp_orch.places.private import write_atomically
    from fsdp_orch.record.event_types import finite

    data = {"attempt": attempt, "step": step, "loss": finite(loss),
            "loss_source": loss_source if finite(loss) is not None else None,
            "loss_step": loss_step if finite(loss) is not None else None,
            "progress_at": progress_at, "quiet": quiet, "active_at": active_at}
    try:
        write_atomically(os.path.join(run_dir, LIVE_FILE), json.dumps(data), mode=0o600)
    except OSError:
        pass


def read_live(run_dir: str) -> dict | None:  # type: ignore[type-arg]
    """The file's content when it is well formed, else None (absent, torn, or not this shape)."""
    try:
        with open(os.path.join(run_dir, LIVE_FILE), encoding="utf-8") as f:
            text = f.read(4096)
    except (OSError, ValueError):
        return None
    import json  # only once there is a file: most running jobs of an index have none

    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    numbers = (data.get("attempt"), data.get("step"), data.get("progress_at"))
    if (type(numbers[0]) is not int or type(numbers[1]) is not int
            or not isinstance(numbers[2], (int, float)) or not math.isfinite(numbers[2])):
        return None
    from fsdp_orch.record.hang_hold import read_hold

    held = read_hold(run_dir)  # why the hang rule holds its verdict back (record.hang_hold)
    if held is not None:
        data["held"] = held
    return data


def apply_live(status: JobStatus, live: dict | None) -> bool:  # type: ignore[type-arg]
    """Fold ``live`` into a running job's status when it is its current attempt's and ahead of
    what the event log said, or says a rank has returned from its script; True when it changed
    anything."""
    if live is None or not status.running or live["attempt"] != status.attempts - 1:
        return False
    from fsdp_orch.record.hang_hold import hold_text

    quiet = live.get("quiet") if live.get("quiet") in QUIET_STATES else None
    active = live.get("active_at")
    active = float(active) if isinstance(active, (int, float)) and math.isfinite(active) else None
    newer = active is not None and (status.active_at is None or active > status.active_at)
    held = hold_text(live.get("held"), live["attempt"])
    changed = quiet != status.quiet or newer or held != status.hang_held
    status.quiet, status.hang_held = quiet, held
    if newer:
        status.active_at = active
    current = status.progress_step if status.progress_attempt == live["attempt"] else None
    if current is not None and live["step"] <= current:
        return changed
    from fsdp_orch.record.event_types import Progress
    from fsdp_orch.record.fold import fold_progress

    loss, loss_step = live.get("loss"), live.get("loss_step")
    fold_progress(status, Progress(job=status.id, step=live["step"],
                                   loss=loss if isinstance(loss, (int, float)) else None,
                                   loss_step=loss_step if type(loss_step) is int else None,
                                   progress_at=float(live["progress_at"]),
                                   loss_source=live.get("loss_source")
                                   if isinstance(live.get("loss_source"), str) else None))
    return True


__all__ = ["LIVE_EVERY_S", "LIVE_FILE", "QUIET_STATES", "apply_live", "read_live", "write_live"]
