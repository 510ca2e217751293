"""Plain-text tables for the CLI (no rich import on the status path: it must start fast)."""

from __future__ import annotations

import time

from fsdp_orch.vocab.states import WAITING, JobState
from fsdp_orch.vocab.times import iso_time

TYPE_CHECKING = False  # the table of `status` needs none of what `status ID`'s lines import
if TYPE_CHECKING:
    from typing import Any

    from fsdp_orch.record.status import JobNotice, JobStatus


def format_rows(columns: list[str], rows: list[dict[str, Any]]) -> str:
    cells = [[c.upper() for c in columns]] + [["" if r.get(c) is None else str(r.get(c))
                                                for c in columns]
                                               for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def _loss(loss: float | None) -> str:
    return "" if loss is None else f"{loss:.4f}"


def duration(seconds: float) -> str:
    """42s, 7m, 3h05m: short enough for a table cell."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds // 60:.0f}m"
    hours, minutes = divmod(int(seconds // 60), 60)
    return f"{hours}h{minutes:02d}m"


def _state(job: JobStatus, now: float) -> str:
    """The STATE column: a running job whose steps stopped says for how long, and the hang window in
    force (``RUNNING (stalled 42s/5m)``); one that takes no step while its ranks save or shut down
    says so (``RUNNING (saving)``, ``RUNNING (finishing)``)."""
    stalled = job.stalled_for_s(now)
    if stalled is None:
        return f"{job.state} ({job.quiet})" if job.running and job.quiet else job.state
    window = f"/{duration(job.hang_window_s)}" if job.hang_window_s is not None else ""
    return f"{job.state} (stalled {duration(stalled)}{window})"


def format_jobs(jobs: list[JobStatus], detail: bool = False, now: float | None = None) -> str:
    """The status table (``now``: the time of reading, default the clock's)."""
    now = time.time() if now is None else now
    rows = [{"id": j.id, "name": _one_line(j.name), "cluster": j.cluster, "state": _state(j, now),
             "attempts": j.attempts, "step": j.progress_step, "loss": _loss(j.progress_loss),
             "ckpt": _ckpt(j), "created": (iso_time(j.created_at) or "")[:19].replace("T", " ")}
            for j in jobs]
    text = format_rows(["id", "name", "cluster", "state", "attempts", "step", "loss", "ckpt",
                        "created"], rows)
    if not detail:
        return text
    return "\n".join([text, *(line for j in jobs for line in detail_lines(j, now))])


def _ckpt(job: JobStatus) -> int | str | None:
    """The CKPT column: the step, or ``?`` for a checkpoint whose step is unknown."""
    if job.last_checkpoint_step is None and job.last_checkpoint_path:
        return "?"
    return job.last_checkpoint_step


def detail_lines(job: JobStatus, now: float | None = None) -> list[str]:
    """What ``status ID`` prints under the table: the loss and where it came from, a stall and the
    hang window in force, the reason, each failure with its hint, the notices and the run folder."""
    # here, not at the top: the checkpoint finders and the event types cost `status` 30 ms
    from fsdp_orch.record.restart_budget import restart_budget
    from fsdp_orch.record.save_cadence import describe
    from fsdp_orch.record.suspects import health_lines
    from fsdp_orch.vocab.hints import for_job

    now = time.time() if now is None else now
    lines = health_lines(job)  # a suspect checkpoint, a NaN loss: first, whatever the state
    if job.progress_loss is not None:
        at = job.progress_step if job.progress_loss_step is None else job.progress_loss_step
        lines.append(f"loss: {_loss(job.progress_loss)} at step {at} "
                     f"({_loss_from(job.progress_loss_source)})")
    stall = job.stalled_for_s(now)
    if stall is not None:
        lines.append(f"stalled: no step for {stall:.0f}s{_window(job, '; ')}")
    elif job.running and (job.hang_window_s is not None or job.hang_held):
        lines.append(_window(job, ""))
    lines.append(goodput_line(job))
    memory = memory_line(job)
    if memory:
        lines.append(memory)
    cadence = job.save_cadence_json()
    if cadence is not None:
        lines.append(describe(cadence))
    if job.reason:
        lines.append(f"reason: {job.reason}")
    finished = finished_line(job)
    if finished:
        lines.append(finished)
    if job.attempts > 1:
        budget = restart_budget(job.spec_json, job.attempts, job.failures)
        lines.append(f"restarts: {budget.text()}")
    if job.excluded_hosts:
        lines.append(f"left out: {', '.join(job.excluded_hosts)} (lost; the attempts after run "
                     "without them)")
    for f in job.failures:
        stalled = f" (stalled {f.stalled_for_s:.1f}s)" if f.stalled_for_s is not None else ""
        lines.append(f"attempt {f.attempt}: {f.category}{stalled} -> {f.action}: "
                     f"{f.evidence or ''}")
        if f.hint:
            lines.append(f"  hint: {for_job(f.hint, job.id)}")
    if job.last_checkpoint_path:
        step = (f"step {job.last_checkpoint_step}" if job.last_checkpoint_step is not None
                else f"step unknown: {job.last_checkpoint_note or 'not in its name or content'}")
        lines.append(f"checkpoint: {job.last_checkpoint_path} ({step})")
    if job.hang_detection_off is not None:
        lines.append(f"hang detection: off: {job.hang_detection_off}")
    for n in job.notices:  # one of the job's own (submit_fresh) has no attempt
        lines.append(("" if n.attempt is None else f"attempt {n.attempt}: ")
                     + f"{_notice_kind(job, n)}: {n.message}")
    if job.run_dir:
        lines.append(f"run dir: {job.run_dir}")
    return lines


def _notice_kind(job: JobStatus, notice: JobNotice) -> str:
    """The notice's kind, but a ``waiting`` one of an attempt that has stepped since is said as
    past (a pod's "ContainerCreating" under a job at step 68 read as if it still waited)."""
    record = job.attempt_records.get(notice.attempt) if notice.attempt is not None else None
    if notice.kind == WAITING and record is not None and record.first_step_at is not None:
        return "waited before its first step"
    return notice.kind


def finished_line(job: JobStatus) -> str | None:
    """What an ended job's script did after its last step, where it is not simply done: its ranks
    stopped after the last checkpoint, its final outputs missing or not known."""
    if not job.ended or job.finished is True or job.state in (JobState.FAILED, JobState.CANCELLED):
        return None
    if job.finished is False:
        return "finished: no; missing: " + ("; ".join(job.missing) or "not said")
    return ("finished: unknown (its ranks were stopped after the last checkpoint; nothing tells "
            "what the script writes after it)")


def goodput_line(job: JobStatus) -> str:
    """``goodput: 91.3% of 2m (largest loss: detection 12.1s)``:
    to the end, or to the latest event."""
    g = job.goodput_json()  # status --json's figures, rounded as there
    if g["goodput_pct"] is None:
        return "goodput: no time yet"
    so_far = "" if job.ended else " so far"
    loss = g["largest_loss"]
    largest = "" if loss is None else f" (largest loss: {loss['bucket']} {loss['seconds']:.1f}s)"
    return f"goodput: {g['goodput_pct']:.1f}% of {duration(g['wall_s'])}{so_far}{largest}"


def memory_line(job: JobStatus) -> str | None:
    """``memory: estimated 72.8 GiB a GPU (tensors 64.2) of 80.0; measured tensors 61.0 GiB (rank
    3, attempt 1)``: fit's estimate at submit beside what the ranks measured, when either is
    known."""
    m = job.memory_json()
    if m is None:
        return None
    parts = []
    if m["estimated_peak_gib_per_gpu"] is not None:
        of = "" if m["gpu_memory_gib"] is None else f" of {m['gpu_memory_gib']:.1f}"
        parts.append(f"estimated {m['estimated_peak_gib_per_gpu']:.1f} GiB a GPU (tensors "
                     f"{m['estimated_tensor_gib_per_gpu']:.1f}){of}")
    if m["measured_tensor_gib_per_gpu"] is not None:
        parts.append(f"measured tensors {m['measured_tensor_gib_per_gpu']:.2f} GiB (rank "
                     f"{m['measured_rank']}, attempt {m['measured_attempt']}, "
                     f"max_memory_allocated)")
    else:
        parts.append("measured: none (the ranks held no CUDA memory)")
    return "memory: " + "; ".join(parts)


def _loss_from(source: str | None) -> str:
    from fsdp_orch.record.event_types import RUNTIME_LOSS

    if source in (None, RUNTIME_LOSS):
        return "from fsdp_orch.runtime"
    return f"read from the console, {source} format"


def _window(job: JobStatus, before: str) -> str:
    """The hang window in force, and why the hang rule holds its verdict back, when it does."""
    held = f"; held back: {job.hang_held}" if job.hang_held else ""
    if job.hang_window_s is None:
        return f"{before}{held[2:]}" if held else ""
    return (f"{before}hang window in force: {job.hang_window_s:g}s ({job.hang_window_mode})"
            f"{held}")


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())
