"""The two drawings of the report, as inline SVG text: the timeline (the goodput spans as a strip,
attempts as bars, verdicts as marks, checkpoints as ticks, the gaps between attempts shaded) and the
loss curve. Pure: every user word is escaped here, at the boundary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from fsdp_orch.record.goodput import BUCKETS, Goodput

WIDTH, LEFT, RIGHT = 960, 90, 20
COLORS = {"productive": "#2e7d32", "queue": "#9e9e9e", "startup": "#1e88e5",
          "checkpoint": "#00897b", "detection": "#e53935", "restart": "#fb8c00",
          "lost_work": "#8e24aa", "teardown": "#6d4c41", "unaccounted": "#cfcfcf"}
# Attempts in shades of one hue that no bucket, verdict or checkpoint uses: one colour per meaning
# (the first palette reused the productive green and a failure red for attempts 2 and 1).
ATTEMPT_COLORS = ("#283593", "#5c6bc0", "#0d47a1", "#7986cb", "#1a237e", "#3f51b5")
ATTEMPT_DASHES = ("", "6,3", "2,2", "8,3,2,3", "4,4", "1,3")  # told apart without colour too
assert set(COLORS) == set(BUCKETS)
assert not set(ATTEMPT_COLORS) & set(COLORS.values())
# as wide as the page allows, never wider than drawn; the height follows the viewBox
_SIZE = f'width="100%" style="max-width:{WIDTH}px;height:auto"'


@dataclass(frozen=True)
class Bar:
    attempt: int
    start: float
    end: float
    first_step_at: float | None
    exit_code: int | None


@dataclass(frozen=True)
class Mark:
    at: float
    label: str  # a failure's attempt and category, a checkpoint's step


def _num(x: float) -> str:
    return f"{x:.1f}"


def _text(x: float, y: float, words: str, anchor: str = "start", size: int = 12,
          fill: str = "#333") -> str:
    return (f'<text x="{_num(x)}" y="{_num(y)}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{fill}">{escape(words)}</text>')


def _rect(x: float, y: float, w: float, h: float, fill: str, title: str = "",
          extra: str = "") -> str:
    tip = f"<title>{escape(title)}</title>" if title else ""
    return (f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(max(w, 0.5))}" height="{_num(h)}" '
            f'fill="{fill}"{extra}>{tip}</rect>')


def timeline(goodput: Goodput, bars: list[Bar], verdicts: list[Mark],
             checkpoints: list[Mark], stragglers: list[Mark]) -> str:
    """The job's life left to right: a strip of goodput spans, one bar per attempt (its start-up
    lighter), verdicts as red marks, checkpoints as ticks, stragglers named as purple diamonds,
    and the gaps between attempts shaded."""
    t0, wall = goodput.started_at, max(goodput.wall_s, 1e-9)
    inner = WIDTH - LEFT - RIGHT

    def x(at: float) -> float:
        return LEFT + inner * min(max((at - t0) / wall, 0.0), 1.0)

    strip_y, bar_y0, bar_h = 24, 64, 22
    height = bar_y0 + len(bars) * (bar_h + 8) + 56
    parts = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" {_SIZE} '
             f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="timeline of the job">',
             f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>']
    for prev, nxt in zip(bars, bars[1:], strict=False):  # the gaps between attempts, shaded across
        parts.append(_rect(x(prev.end), bar_y0 - 6, x(nxt.start) - x(prev.end),
                           len(bars) * (bar_h + 8) + 4,
                           "#fb8c00", f"between attempt {prev.attempt} and {nxt.attempt}: "
                           f"{nxt.start - prev.end:.1f}s", ' fill-opacity="0.18" class="gap"'))
    parts.append(_text(LEFT - 8, strip_y + 15, "goodput", "end"))
    for span in goodput.spans:
        parts.append(_rect(x(span.start), strip_y, x(span.end) - x(span.start), 20,
                           COLORS[span.bucket], f"{span.bucket}: {span.end - span.start:.1f}s",
                           f' class="span {span.bucket}"'))
    for i, bar in enumerate(bars):
        parts += _attempt_bar(bar, bar_y0 + i * (bar_h + 8), bar_h, x, goodput.until)
    axis_y = bar_y0 + len(bars) * (bar_h + 8) + 4
    parts.append(f'<line x1="{LEFT}" y1="{axis_y}" x2="{WIDTH - RIGHT}" '
                 f'y2="{axis_y}" stroke="#555"/>')
    for cp in checkpoints:
        parts.append(f'<line class="checkpoint" x1="{_num(x(cp.at))}" y1="{axis_y - 10}" '
                     f'x2="{_num(x(cp.at))}" y2="{axis_y}" stroke="#000" '
                     f'stroke-width="2"><title>{escape(cp.label)}</title></line>')
    for v in verdicts:
        vx = x(v.at)
        parts.append(f'<path class="verdict" d="M{_num(vx - 6)},{bar_y0 - 14} '
                     f'L{_num(vx + 6)},{bar_y0 - 14} L{_num(vx)},{bar_y0 - 4} Z" '
                     f'fill="#d50000"><title>{escape(v.label)}</title></path>')
        parts.append(f'<line x1="{_num(vx)}" y1="{bar_y0 - 4}" x2="{_num(vx)}" y2="{axis_y}" '
                     'stroke="#d50000" stroke-dasharray="3,3"/>')
    for mark in stragglers:
        sx = x(mark.at)
        parts.append(f'<path class="straggler" d="M{_num(sx)},{axis_y - 16} '
                     f'L{_num(sx + 6)},{axis_y - 10} L{_num(sx)},{axis_y - 4} '
                     f'L{_num(sx - 6)},{axis_y - 10} Z" fill="#6a1b9a">'
                     f'<title>{escape(mark.label)}</title></path>')
    for k in range(6):
        at = t0 + wall * k / 5
        parts.append(_text(x(at), axis_y + 16, f"{at - t0:.0f}s", "middle", 11))
    parts.append(_text(LEFT, axis_y + 34, "seconds since submission; triangles: verdicts; black "
                       "ticks: checkpoints; diamonds: stragglers; shaded: between attempts",
                       size=11, fill="#666"))
    parts.append("</svg>")
    return "\n".join(parts)



def _attempt_bar(bar: Bar, y: float, bar_h: float, x: Callable[[float], float],
                 until: float) -> list[str]:
    """One attempt's row: its label, its bar, and its start-up drawn lighter over the bar."""
    color = ATTEMPT_COLORS[bar.attempt % len(ATTEMPT_COLORS)]
    ended = "running" if bar.exit_code is None and bar.end == until else f"exit {bar.exit_code}"
    row = [_text(LEFT - 8, y + 15, f"attempt {bar.attempt}", "end"),
           _rect(x(bar.start), y, x(bar.end) - x(bar.start), bar_h, color,
                 f"attempt {bar.attempt}: {bar.end - bar.start:.1f}s, {ended}", ' class="attempt"')]
    if bar.first_step_at is not None:
        row.append(_rect(x(bar.start), y, x(bar.first_step_at) - x(bar.start), bar_h, "#ffffff",
                         f"attempt {bar.attempt} start-up: {bar.first_step_at - bar.start:.1f}s",
                         ' fill-opacity="0.55"'))
    return row

POINT_MARKS = 500


def loss_curve(points: dict[int, list[tuple[int, float]]]) -> str:
    """Loss against step, one line per attempt (a resume that trains steps again draws over the
    attempt before it). ``points``: attempt -> (step, loss)."""
    height, top, bottom = 300, 16, 40
    every = [p for line in points.values() for p in line]
    parts = [f'<svg id="loss" xmlns="http://www.w3.org/2000/svg" {_SIZE} '
             f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="loss curve">',
             f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>']
    if not every:
        parts += [_text(WIDTH / 2, height / 2, "no loss reported", "middle", 14, "#666"), "</svg>"]
        return "\n".join(parts)
    s0, s1 = min(s for s, _ in every), max(s for s, _ in every)
    l0, l1 = min(v for _, v in every), max(v for _, v in every)
    s1, l1 = (s1 if s1 > s0 else s0 + 1), (l1 if l1 > l0 else l0 + 1)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, height - top - bottom

    def xy(step: int, loss: float) -> str:
        return (f"{_num(LEFT + inner_w * (step - s0) / (s1 - s0))},"
                f"{_num(top + inner_h * (l1 - loss) / (l1 - l0))}")

    parts.append(f'<line x1="{LEFT}" y1="{top + inner_h}" x2="{WIDTH - RIGHT}" '
                 f'y2="{top + inner_h}" stroke="#555"/>')
    parts.append(f'<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{top + inner_h}" stroke="#555"/>')
    for value, y in ((l1, top), (l0, top + inner_h)):
        parts.append(_text(LEFT - 8, y + 4, f"{value:.4g}", "end", 11))
    for step, anchor in ((s0, "start"), (s1, "end")):
        parts.append(_text(LEFT + inner_w * (step - s0) / (s1 - s0), top + inner_h + 16,
                           f"step {step}", anchor, 11))
    parts.append(_text(LEFT + inner_w / 2, top + inner_h + 16, "optimizer step", "middle", 11,
                       "#666").replace("<text ", '<text class="axis-title" ', 1))
    parts.append(f'<text class="axis-title" x="14" y="{_num(top + inner_h / 2)}" font-size="11" '
                 f'fill="#666" text-anchor="middle" '
                 f'transform="rotate(-90 14 {_num(top + inner_h / 2)})">loss</text>')
    for n, (attempt, line) in enumerate(sorted(points.items())):
        color = ATTEMPT_COLORS[attempt % len(ATTEMPT_COLORS)]
        path = " ".join(xy(s, v) for s, v in line)
        dash = ATTEMPT_DASHES[attempt % len(ATTEMPT_DASHES)]
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<polyline class="loss-line" data-attempt="{attempt}" points="{path}" '
                     f'fill="none" stroke="{color}" stroke-width="2"{dashed}/>')
        # every point logged, each with its step and loss on hover (the line alone past
        # POINT_MARKS: a long run's page stays small)
        for s, v in line if len(line) <= POINT_MARKS else ():
            cx, cy = xy(s, v).split(",")
            parts.append(f'<circle class="loss-point" data-attempt="{attempt}" data-step="{s}" '
                         f'data-loss="{v!r}" cx="{cx}" cy="{cy}" r="2.5" '
                         f'fill="{color}"><title>attempt {attempt}, step {s}: loss {v:.4g}'
                         '</title></circle>')
        parts.append(_rect(LEFT + 10 + n * 110, height - 14, 12, 10, color))
        parts.append(_text(LEFT + 26 + n * 110, height - 5, f"attempt {attempt}", size=11))
    parts.append("</svg>")
    return "\n".join(parts)


__all__ = ["COLORS", "Bar", "Mark", "loss_curve", "timeline"]
