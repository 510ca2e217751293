"""``submit --wait``: follow a job to its end, with a one-line live progress display."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from fsdp_orch.record.restart_budget import restart_budget
from fsdp_orch.record.status import Failure, JobStatus
from fsdp_orch.vocab.hints import for_job
from fsdp_orch.vocab.states import TERMINAL_NAMES, JobState


def progress_line(row: JobStatus, now: float | None = None) -> str:
    """The live line: the attempt (numbered from 0, as events and ``logs --attempt`` number it) and
    its progress; no step until the current attempt has reported one of its own, and no checkpoint
    ahead of the step shown (a new attempt's first report can come before its resumed step does);
    while a restart waits out its backoff, the seconds left."""
    parts = [f"{row.id}", row.state]
    if row.attempts:
        parts.append(attempt_text(row))
    step = None
    if row.progress_step is not None and row.progress_attempt == row.attempts - 1:
        step = row.progress_step
        parts.append(f"step {step}")
        if row.progress_loss is not None:
            at = row.progress_loss_step
            parts.append(f"loss {float(row.progress_loss):.4f}"
                         + ("" if at is None or at == step else f" (step {at})"))
    if row.last_checkpoint_step is not None:
        if step is None or row.last_checkpoint_step <= step:
            parts.append(f"checkpoint {row.last_checkpoint_step}")
    elif row.last_checkpoint_path:
        parts.append("checkpoint (step unknown)")
    if row.state == JobState.RESTARTING and row.restart_at is not None:
        parts.append(countdown(row.restart_at - (now if now is not None else time.time())))
    return "  ".join(parts)


def countdown(left: float) -> str:
    """The backoff left, rounded up (a tenth of a second under 10 s), so that it agrees with the
    restart event's ``delay`` (2.15 s: "next attempt in 2.2s") and never reads 0 while time is left;
    once it is up, the supervisor is starting the attempt."""
    if left <= 0:
        return "next attempt starting"
    if left < 10:
        return f"next attempt in {math.ceil(round(left * 10, 6)) / 10:.1f}s"
    return f"next attempt in {math.ceil(round(left, 6))}s"


def failure_lines(failure: Failure, job_id: str) -> list[str]:
    """What ``--wait`` prints of a failure of job ``job_id`` as it happens: the attempt, the
    category and the action, the evidence's first clause (the culprit comes first in it; ``status``
    has the rest), and the hint, the commands they suggest naming the job."""
    lines = [f"attempt {failure.attempt} failed: {failure.category} -> {failure.action}"]
    if failure.evidence:
        first, _, rest = failure.evidence.partition("; ")
        lines.append(f"  {first}" + (f" (more: fsdp-orch status {job_id})" if rest else ""))
    if failure.hint:
        lines.append(f"  hint: {for_job(failure.hint, job_id)}")
    return lines


def _told_whole(failure: Failure, row: JobStatus) -> bool:
    """A hang's evidence (the culprit's frame) is recorded once its stacks are read, after the
    verdict: a failure is said once it has evidence, or once the job has moved past it."""
    return (failure.evidence is not None or row.state != JobState.RUNNING
            or row.attempts - 1 > failure.attempt)


def attempt_text(row: JobStatus) -> str:
    """``attempt 2 (restart 2; without progress 1 of 3)``: the latest attempt, which restart it is
    (of ``max_restarts`` where a cap is set; attempts the scheduler requeued use none), and the
    failures in a row without progress against ``crash_loop_attempts``."""
    attempt = row.attempts - 1
    if attempt == 0:
        return "attempt 0"
    budget = restart_budget(row.spec_json, row.attempts, row.failures)
    requeued = attempt - budget.restarts
    text = budget.text()
    if requeued:
        text += f", {requeued} requeue{'s' if requeued > 1 else ''}"
    return f"attempt {attempt} ({text})"


def wait_for(index: Any, job_id: str, *, show_progress: bool = True, quiet: bool = False,
             say_failures: bool | None = None, interval: float = 0.5,
             timeout: float | None = None) -> str:
    """Block until the job ends; returns its final state. Progress goes to stderr (not when
    ``quiet``), and each failure as it comes and the reason at the end (``say_failures``, default:
    not ``quiet``; ``submit --wait --json`` says them, its stdout being the status alone)."""
    say_failures = not quiet if say_failures is None else say_failures
    from fsdp_orch.control.liveness import refresh

    last = ""
    last_print = 0.0
    last_state = None
    started = time.monotonic()
    tty = sys.stderr.isatty()
    failures_said = 0  # how many of the job's failures were printed
    while True:
        index.ingest([job_id])
        row = index.store.job_as_shown(job_id)
        if row is None:
            return JobState.FAILED.value
        ready = [f for f in row.failures[failures_said:] if _told_whole(f, row)]
        if say_failures and ready:
            clear = "\r\033[K" if tty and show_progress else ""
            for failure in ready:
                sys.stderr.write(clear + "\n".join(failure_lines(failure, job_id)) + "\n")
                clear = ""
            failures_said, last = failures_said + len(ready), ""
        line = progress_line(row, time.time())
        now = time.monotonic()
        # A new state is said at once (a countdown said 2 s late reads "0s" after a 2 s delay).
        if not quiet and line != last and (tty or now - last_print >= 2.0
                                           or row.state != last_state
                                           or row.state in TERMINAL_NAMES):
            if tty and show_progress:
                sys.stderr.write("\r\033[K" + line)
            else:
                sys.stderr.write(line + "\n")
            sys.stderr.flush()
            last, last_print, last_state = line, now, row.state
        if row.state in TERMINAL_NAMES:
            if tty and show_progress and not quiet:
                sys.stderr.write("\n")
            if say_failures and row.reason and row.state != JobState.SUCCEEDED:
                sys.stderr.write(f"reason: {row.reason}\n")
            return str(row.state)
        refresh(index, [job_id])
        if timeout is not None and now - started > timeout:
            if tty and show_progress and not quiet:
                sys.stderr.write("\n")  # what follows starts on a line of its own
                sys.stderr.flush()
            return str(row.state)
        time.sleep(interval)
