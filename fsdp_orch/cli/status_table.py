"""Plain-text tables for the CLI (no rich import on the status path: it must start fast)."""

from __future__ import annotations

from typing import Any

from fsdp_orch.record.model import JobStatus
from fsdp_orch.vocab.times import iso_time


def format_rows(columns: list[str], rows: list[dict[str, Any]]) -> str:
    cells = [[c.upper() for c in columns]] + [["" if r.get(c) is None else str(r.get(c)) for c in columns]
                                               for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _loss(loss: float | None) -> str:
    return "" if loss is None else f"{loss:.4f}"


def format_jobs(jobs: list[JobStatus], detail: bool = False) -> str:
    rows = [{"id": j.id, "name": _one_line(j.name), "cluster": j.cluster, "state": j.state,
             "attempts": j.attempts, "step": j.progress_step, "loss": _loss(j.progress_loss),
             "ckpt": _ckpt(j), "created": (iso_time(j.created_at) or "")[:19].replace("T", " ")}
            for j in jobs]
    text = format_rows(["id", "name", "cluster", "state", "attempts", "step", "loss", "ckpt", "created"], rows)
    if not detail:
        return text
    return "\n".join([text, *(line for j in jobs for line in detail_lines(j))])


def _ckpt(job: JobStatus) -> int | str | None:
    """The CKPT column: the step, or ``?`` for a checkpoint whose step is unknown."""
    if job.last_checkpoint_step is None and job.last_checkpoint_path:
        return "?"
    return job.last_checkpoint_step


def detail_lines(job: JobStatus) -> list[str]:
    """What ``status ID`` prints under the table: the reason, each failure with its hint, the
    notices and the run folder."""
    lines = []
    if job.reason:
        lines.append(f"reason: {job.reason}")
    for f in job.failures:
        stalled = f" (stalled {f.stalled_for_s:.1f}s)" if f.stalled_for_s is not None else ""
        lines.append(f"attempt {f.attempt}: {f.category}{stalled} -> {f.action}: {f.evidence or ''}")
        if f.hint:
            lines.append(f"  hint: {f.hint}")
    if job.last_checkpoint_path:
        step = (f"step {job.last_checkpoint_step}" if job.last_checkpoint_step is not None
                else f"step unknown: {job.last_checkpoint_note or 'not in its name or content'}")
        lines.append(f"checkpoint: {job.last_checkpoint_path} ({step})")
    if job.hang_detection_off is not None:
        lines.append(f"hang detection: off: {job.hang_detection_off}")
    for n in job.notices:
        lines.append(f"attempt {n.attempt}: {n.kind}: {n.message}")
    if job.run_dir:
        lines.append(f"run dir: {job.run_dir}")
    return lines


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())
