"""Durations as users write them: ``90s``, ``10m``, ``1h``, ``1h30m``,
``250ms`` or a bare number of seconds."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# ASCII digits only: \d and float() also take other scripts' digits ('٣٠s' was 30 s)
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d))+")


def parse_duration(value: object) -> float:
    """Return seconds. Raises ValueError with the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 90s, 10m or 1h; got {_shown(value)}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"expected a non-negative duration; got {_shown(value)}")
        try:
            return _finite(float(value), value)
        except OverflowError:  # an int beyond any float
            raise ValueError("expected a finite duration like 90s, 10m or 1h; "
                             f"got {_shown(value)}") from None
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", text):
            return _finite(float(text), value)
        if _WHOLE.fullmatch(text):
            return _finite(sum(float(n) * _UNITS[u] for n, u in _PART.findall(text)), value)
    raise ValueError(f"expected a duration like 90s, 10m or 1h; got {_shown(value)}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _finite(seconds: float, given: object) -> float:
    if not math.isfinite(seconds):  # .inf, .nan, or 400 digits that overflow a float
        raise ValueError(f"expected a finite duration like 90s, 10m or 1h; got {_shown(given)}")
    return seconds


def format_duration(seconds: float) -> str:
    """Short human form used in tables and rendered comments."""
    seconds = float(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:g}s"
    if seconds < 3600:
        m, s = divmod(int(seconds), 60)
        return f"{m}m{s:02d}s" if s else f"{m}m"
    h, rest = divmod(int(seconds), 3600)
    m = rest // 60
    return f"{h}h{m:02d}m" if m else f"{h}h"
