"""Checks of single values a user hands over (a job id on the command line, a header in a spec, an
argument of the Python API): one rule each, written once, raising InputError naming the field.
Pure: no I/O, so a check runs before anything is opened or written."""

from __future__ import annotations

import math
import re

from fsdp_orch.vocab.errors import InputError

# C0 controls and DEL: a line break in a name breaks the status table and the scripts' comments, and
# CR/LF in an HTTP header splits it (header injection).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SPOKEN = {"\n": "a line feed (\\n)", "\r": "a carriage return (\\r)", "\t": "a tab (\\t)",
           "\x00": "a NUL byte (\\x00)", "\x7f": "DEL (\\x7f)"}


def control_character(text: str) -> str | None:
    """The first control character in ``text``, said in words
    (``a line feed (\\n)``); None if none."""
    found = _CONTROL.search(text)
    if found is None:
        return _unseen(text)
    char = found.group()
    return _SPOKEN.get(char, f"a control character (\\x{ord(char):02x})")


def _unseen(text: str) -> str | None:
    """The first character beyond ASCII that is not seen as itself: a C1 control (U+0085), a
    format character (the bidi overrides and isolates U+202A-U+202E and U+2066-U+2069 that make a
    name read backwards, zero-width ones, a BOM), a line or paragraph separator; None if none."""
    if text.isascii():
        return None
    import unicodedata

    for char in text:
        kind = unicodedata.category(char)
        if kind in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn") and not char.isascii():
            name = unicodedata.name(char, "a control character" if kind == "Cc" else "unassigned")
            return f"U+{ord(char):04X} ({name.lower()})"
    return None


def job_id(value: object, field: str = "JOB_ID") -> str:
    """A job id or a prefix of one, as given. Empty is refused: it is a prefix of every id, and
    ``cancel "$JOB"`` with JOB unset must not cancel some job."""
    if not isinstance(value, str):
        raise InputError(f"expected a job id (a string); got {type(value).__name__} {value!r}",
                         field=field)
    if not value.strip():
        raise InputError(f"expected a job id (see 'fsdp-orch status'); got {value!r}", field=field)
    problem = control_character(value)
    if problem is not None:
        raise InputError(f"expected a job id; it holds {problem}: {value!r}", field=field)
    if len(value) > MAX_ID:
        raise InputError(f"expected a job id of at most {MAX_ID} characters; got "
                         f"{len(value)}: {value[:20]!r}...", field=field)
    return value


MAX_ID = 200  # job ids are 12 hex digits; idempotency keys and names stay under this too


def init_from(value: object, field: str = "--init-from") -> str:
    """A warm start's source as given: a job id or a checkpoint path, never empty (an empty one was
    a cold start that looked like a warm one)."""
    if not isinstance(value, str):
        raise InputError("expected a job id or a checkpoint path (a string); "
                         f"got {type(value).__name__} {value!r}", field=field)
    if not value.strip():
        raise InputError("expected a job id or a checkpoint path; "
                         f"got {value!r} (leave it out for a cold start)", field=field)
    return plain_text(value, field, "a job id or a checkpoint path")


def plain_text(value: str, field: str, what: str) -> str:
    """``value`` when it holds no control or bidi character and is at most 4096 characters."""
    problem = control_character(value)
    if problem is not None:
        raise InputError(f"expected {what} without control characters; it holds {problem}",
                         field=field)
    if len(value) > 4096:
        raise InputError(f"expected {what} of at most 4096 characters; got {len(value)}",
                         field=field)
    return value


def seconds(value: object, field: str) -> float:
    """A finite, non-negative number of seconds (not a bool, not a text such as '10s')."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError("expected a number of seconds (such as 3600); "
                         f"got {type(value).__name__} {value!r}",
                         field=field)
    if not math.isfinite(value) or value < 0:
        raise InputError(f"expected a number of seconds, 0 or more; got {value!r}", field=field)
    return float(value)


def of_type(value: object, types: type | tuple[type, ...], field: str, expected: str,
            optional: bool = False) -> object:
    """``value`` when it is one of ``types`` (None too when
    ``optional``); bool is not an int here."""
    if optional and value is None:
        return value
    wrong_bool = isinstance(value, bool) and bool not in (types if isinstance(types, tuple)
                                                          else (types,))
    if wrong_bool or not isinstance(value, types):
        raise InputError(f"expected {expected}; got {type(value).__name__} {value!r}", field=field)
    return value


__all__ = ["control_character", "init_from", "job_id", "of_type", "plain_text", "seconds"]
