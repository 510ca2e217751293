"""The report page of one job: its status (the fold of its events), drawn. Pure: the caller reads
the events and writes the file. The figures are those of ``status --json`` (``JobStatus.to_json``),
each also in a ``data-`` attribute so a reader (or a test) can take them without parsing the
text."""

from __future__ import annotations

from html import escape
from typing import Any

from fsdp_orch.record.event_types import (
    STRAGGLER,
    AttemptStarted,
    CheckpointCommitted,
    Event,
    Progress,
    finite,
)
from fsdp_orch.record.goodput import BUCKETS
from fsdp_orch.record.save_cadence import describe
from fsdp_orch.record.status import JobStatus
from fsdp_orch.record.suspects import health_notices
from fsdp_orch.report.svg import COLORS, Bar, Mark, loss_curve, timeline

MEANING = {
    "productive": "first to last step of each attempt, less the steps trained again",
    "queue": "submission to the first attempt, and a requeued allocation's wait",
    "startup": "an attempt's start to its first step (launch, imports, "
               "process group, checkpoint load)",
    "checkpoint": "the runtime's checkpoint saves holding training up "
                  "(scripts that save by themselves: 0)",
    "detection": "an attempt's last step to the failure's verdict",
    "restart": "an attempt's end to the next one's start, the backoff included",
    "lost_work": "steps trained again after resuming from an older checkpoint",
    "teardown": "the verdict (or the last step) to the attempt's end; "
                "the last attempt's end to the job's",
    "unaccounted": "time no event explains (an attempt whose end the log does not say)",
}

STYLE = """
body { font-family: sans-serif; margin: 16px; color: #222; max-width: 1000px; }
svg { display: block; } .scroll { overflow-x: auto; }
h1 { font-size: 20px; margin-bottom: 4px; } h2 { font-size: 16px; margin-top: 28px; }
.meta { color: #555; font-size: 13px; } .big { font-size: 28px; font-weight: bold; }
table { border-collapse: collapse; font-size: 13px; } \
td, th { border: 1px solid #ccc; padding: 4px 8px; }
th { background: #f3f3f3; text-align: left; } \
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 6px; \
vertical-align: middle; }
.evidence { font-family: monospace; white-space: pre-wrap; max-width: 560px; }
"""


def render(status: JobStatus, events: list[Event],
           logged: dict[int, list[tuple[int, float]]] | None = None) -> str:
    """The whole page, one self-contained HTML document (inline CSS and SVG, no scripts, no
    fetches). ``logged``: every loss the job logged, by attempt (``record.loss_points``); an
    attempt with none there is drawn from its progress events."""
    doc = status.to_json()
    goodput = status.goodput()
    g = doc["goodput"]
    pct = "n/a" if g["goodput_pct"] is None else f"{g['goodput_pct']:.1f}%"
    loss = g["largest_loss"]
    largest = "none" if loss is None else f"{loss['bucket']} {loss['seconds']:.1f}s"
    so_far = " so far (to its latest event)" if g["running"] else ""
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>fsdp-orch report: {escape(status.name)} ({escape(status.id)})</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{escape(status.name)} <span class='meta'>{escape(status.id)}</span></h1>",
        f"<p class='meta'>state <b id='state'>{escape(status.state)}</b> &middot; cluster "
        f"{escape(status.cluster)} ({escape(status.kind)}) &middot; "
        f"attempts {status.attempts} &middot; submitted {escape(doc['created_at'] or '')} &middot; "
        f"until {escape(g['until'] or '')}</p>",
        f"<p><span class='big' id='goodput' data-goodput-pct='{_attr(g['goodput_pct'])}' "
        f"data-wall-s='{_attr(g['wall_s'])}'>goodput {pct}</span> "
        f"of {g['wall_s']:.1f}s wall time{so_far}"
        f" &middot; largest loss: <b id='largest-loss'>{escape(largest)}</b></p>",
    ]
    if status.reason:
        parts.append(f"<p>reason: {escape(status.reason)}</p>")
    parts += ["<h2>Timeline</h2>",
              timeline(goodput, _bars(status, goodput.until), _verdicts(status),
                       _checkpoints(events), _stragglers(status)), _legend()]
    parts += ["<h2>Attempts</h2>", _attempts(status)]
    parts += ["<h2>Loss</h2>", loss_curve({**_losses(events), **(logged or {})})]
    parts += ["<h2>Where the time went</h2>", _breakdown(g)]
    parts += ["<h2>Save cadence</h2>", _save_cadence(doc["save_cadence"])]
    parts += ["<h2>Failures</h2>", f"<div class='scroll'>{_failures(doc['failures'])}</div>"]
    parts += ["<h2>Suspect checkpoints and losses</h2>", _suspects(status)]
    parts += ["<h2>Notices</h2>", _notices(doc["events"])]
    parts.append(f"<p class='meta'>run folder: {escape(status.run_dir)}</p></body></html>")
    return "\n".join(parts) + "\n"


def _attr(value: float | None) -> str:
    return "" if value is None else repr(value)


def _bars(status: JobStatus, until: float) -> list[Bar]:
    return [Bar(r.attempt, r.started_at, r.ended_at if r.ended_at is not None else until,
                r.first_step_at, r.exit_code)
            for r in sorted(status.attempt_records.values(), key=lambda r: r.attempt)]


def _verdicts(status: JobStatus) -> list[Mark]:
    return [Mark(f.detected_at, f"attempt {f.attempt}: {f.category} -> {f.action}")
            for f in status.failures]


def _checkpoints(events: list[Event]) -> list[Mark]:
    return [Mark(e.at, f"checkpoint at step {e.step if e.step is not None else '?'}")
            for e in events if isinstance(e, CheckpointCommitted)]


def _stragglers(status: JobStatus) -> list[Mark]:
    return [Mark(n.at, f"attempt {n.attempt}: straggler: {n.message}")
            for n in status.notices if n.kind == STRAGGLER]


def _losses(events: list[Event]) -> dict[int, list[tuple[int, float]]]:
    """Attempt -> (step, loss) from the progress events, each with the attempt started before it."""
    attempt, points = 0, {}  # type: ignore[var-annotated]
    for event in events:
        if isinstance(event, AttemptStarted):
            attempt = int(event.attempt)
        elif isinstance(event, Progress) and (loss := finite(event.loss)) is not None:
            points.setdefault(attempt, []).append((int(event.step), loss))
    return points


def _attempts(status: JobStatus) -> str:
    """One row per attempt: when it started and ended, the steps it trained (from the checkpoint
    it resumed, to its last step reported), that checkpoint, and how it ended."""
    from fsdp_orch.vocab.times import iso_time

    verdicts = {f.attempt: f"{f.category} -> {f.action}" for f in status.failures}
    rows = ["<div class='scroll'><table id='attempts'><tr><th>attempt</th><th>started</th>"
            "<th>ended</th><th>steps</th><th>resumed from</th><th>how it ended</th></tr>"]
    for r in sorted(status.attempt_records.values(), key=lambda r: r.attempt):
        steps = "" if r.last_step is None else f"{r.resume_step or 0} to {r.last_step}"
        ended = verdicts.get(r.attempt) or (
            "running" if r.ended_at is None else f"exit {r.exit_code}")
        rows.append(f"<tr class='attempt' data-attempt='{r.attempt}' "
                    f"data-last-step='{'' if r.last_step is None else r.last_step}'>"
                    f"<td class='num'>{r.attempt}</td>"
                    f"<td>{escape(iso_time(r.started_at) or '')}</td>"
                    f"<td>{escape(iso_time(r.ended_at) or '')}</td>"
                    f"<td class='num'>{steps}</td>"
                    f"<td class='evidence'>{escape(r.resume_from or '')}</td>"
                    f"<td>{escape(ended)}</td></tr>")
    rows.append("</table></div>")
    return "\n".join(rows)


def _legend() -> str:
    return "<p class='meta'>" + " ".join(
        "<span class='swatch' "
        f"style='background:{COLORS[b]}'></span>{b.replace('_', ' ')}&nbsp;&nbsp;"
        for b in BUCKETS) + "</p>"


def _breakdown(g: dict[str, Any]) -> str:
    rows = ["<table id='breakdown'><tr><th>bucket</th><th>seconds</th><th>% of wall</th>"
            "<th>what it is</th></tr>"]
    for b in BUCKETS:
        s, p = g["seconds"][b], g["percent"][b]
        rows.append(f"<tr data-bucket='{b}' data-seconds='{_attr(s)}' data-percent='{_attr(p)}'>"
                    f"<td><span class='swatch' style='background:{COLORS[b]}'></span>{b}</td>"
                    f"<td class='num'>{s:.3f}</td><td class='num'>{p:.2f}</td>"
                    f"<td>{escape(MEANING[b])}</td></tr>")
    rows.append(f"<tr data-bucket='wall' data-seconds='{_attr(g['wall_s'])}'><th>wall time</th>"
                f"<th class='num'>{g['wall_s']:.3f}</th><th class='num'>100.00</th>"
                "<th></th></tr></table>")
    return "\n".join(rows)


CADENCE_ROWS = (
    ("interval_steps", "steps between two complete checkpoints (median)"),
    ("interval_s", "wall seconds between two in the same attempt, the save included (median)"),
    ("step_s", "seconds a training step takes (median, gaps without a save)"),
    ("save_cost_s", "seconds one save held training up"),
    ("save_cost_source", "measured by the runtime, or estimated from the step gap holding it"),
    ("save_cost_error_s", "the estimate's standard error (step gaps only)"),
    ("failures", "restartable failures"),
    ("mtbf_s", "attempts' wall time per failure"),
    ("best_interval_steps", "Young's interval sqrt(2 x save x time between failures), in steps"),
    ("best_interval_s", "the same in seconds of training"),
    ("lost_pct_now", "% of the time lost to saves and work done again, at this cadence"),
    ("lost_pct_best", "the same at the best interval"),
)


def _save_cadence(cadence: dict[str, Any] | None) -> str:
    """The save cadence, what it costs, and the interval that would cost least at the failure
    rate seen (``status --json``'s ``save_cadence``)."""
    if cadence is None:
        return "<p>no complete checkpoint yet</p>"
    rows = [f"<p id='save-cadence-line'>{escape(describe(cadence))}</p>",
            f"<table id='save-cadence' data-verdict='{escape(cadence['verdict'] or '')}'>"
            "<tr><th>figure</th><th>value</th><th>what it is</th></tr>"]
    for name, meaning in CADENCE_ROWS:
        value = cadence[name]
        shown = "" if value is None else str(value)
        rows.append(f"<tr data-field='{name}' data-value='{escape(shown)}'><td>{name}</td>"
                    f"<td class='num'>{escape(shown or 'n/a')}</td><td>{escape(meaning)}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _failures(failures: list[dict[str, Any]]) -> str:
    if not failures:
        return "<p>none</p>"
    rows = ["<table id='failures'><tr><th>attempt</th><th>category</th><th>detected</th>"
            "<th>stalled</th><th>action</th><th>evidence</th><th>hint</th></tr>"]
    for f in failures:
        stalled = "" if f["stalled_for_s"] is None else f"{f['stalled_for_s']:.1f}s"
        rows.append(f"<tr class='failure'><td>{f['attempt']}</td><td>{escape(f['category'])}</td>"
                    f"<td>{escape(f['detected_at'] or '')}</td><td>{stalled}</td>"
                    f"<td>{escape(f['action'])}</td>"
                    f"<td class='evidence'>{escape(f['evidence'] or '')}</td>"
                    f"<td>{escape(f['hint'] or '')}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _suspects(status: JobStatus) -> str:
    """The checkpoints set aside as suspect and the losses gone NaN or jumped
    (``record.suspects``), each as its notice says it."""
    found = health_notices(status)
    if not found:
        return "<p id='suspects'>none</p>"
    rows = [f"<tr class='suspect' data-kind='{escape(n.kind)}'><td>{_attempt(n.attempt)}</td>"
            f"<td>{escape(n.kind)}</td><td class='evidence'>{escape(n.message)}</td></tr>"
            for n in found]
    return ("<table id='suspects'><tr><th>attempt</th><th>what</th><th>said</th></tr>"
            + "".join(rows) + "</table>")


def _notices(notices: list[dict[str, Any]]) -> str:
    """What the supervisor noted that is no failure (``teardown_hang``, ``training_complete``,
    ``node_tmp_taken``, ...), as ``status`` lists them."""
    if not notices:
        return "<p>none</p>"
    rows = ["<table id='notices'><tr><th>attempt</th><th>at</th><th>notice</th>"
            "<th>message</th></tr>"]
    for n in notices:
        rows.append(f"<tr class='notice' data-kind='{escape(n['kind'])}'>"
                    f"<td>{_attempt(n['attempt'])}</td>"
                    f"<td>{escape(n['at'] or '')}</td><td>{escape(n['kind'])}</td>"
                    f"<td class='evidence'>{escape(n['message'] or '')}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _attempt(attempt: int | None) -> str:
    """An event's attempt; one of the job's own (``submit_fresh``: before any attempt) has none."""
    return "&ndash;" if attempt is None else str(attempt)


__all__ = ["MEANING", "render"]
