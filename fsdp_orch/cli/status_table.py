"""Plain-text tables for the CLI (no rich import on the status path: it must start fast)."""

from __future__ import annotations

from typing import Any


def format_rows(columns: list[str], rows: list[dict[str, Any]]) -> str:
    cells = [[c.upper() for c in columns]] + [["" if r.get(c) is None else str(r.get(c)) for c in columns]
                                               for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _loss(progress: dict[str, Any] | None) -> str:
    if not progress or progress.get("loss") is None:
        return ""
    return f"{progress['loss']:.4f}"


def format_jobs(jobs: list[dict[str, Any]], detail: bool = False) -> str:
    rows = []
    for j in jobs:
        progress = j.get("progress") or {}
        rows.append({
            "id": j.get("id"), "name": j.get("name"), "cluster": j.get("cluster"),
            "state": j.get("state"), "attempts": j.get("attempts"),
            "step": progress.get("step"), "loss": _loss(progress),
            "ckpt": j.get("last_checkpoint_step"),
            "created": (j.get("created_at") or "")[:19].replace("T", " "),
        })
    text = format_rows(["id", "name", "cluster", "state", "attempts", "step", "loss", "ckpt", "created"], rows)
    if not detail:
        return text
    lines = [text]
    for j in jobs:
        if j.get("reason"):
            lines.append(f"reason: {j['reason']}")
        for f in j.get("failures") or []:
            stalled = f" (stalled {f['stalled_for_s']:.1f}s)" if f.get("stalled_for_s") is not None else ""
            lines.append(f"attempt {f['attempt']}: {f['category']}{stalled} -> {f['action']}: {f.get('evidence') or ''}")
            if f.get("hint"):
                lines.append(f"  hint: {f['hint']}")
        hang = j.get("hang_detection") or {}
        if hang.get("enabled") is False:
            lines.append(f"hang detection: off: {hang.get('reason') or ''}")
        for e in j.get("events") or []:
            lines.append(f"attempt {e.get('attempt')}: {e.get('kind')}: {e.get('message')}")
        if j.get("run_dir"):
            lines.append(f"run dir: {j['run_dir']}")
    return "\n".join(lines)
