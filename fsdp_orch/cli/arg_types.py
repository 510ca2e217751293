"""argparse ``type=`` functions for the flags that take numbers, ports and ids: ASCII digits only
(Python's int() and float() read '٩٤٦٤' as 9464), bounded, and a refusal that says what was
expected (argparse prints it as ``argument --rank: ...``, exit 2). Stdlib only: ``status`` starts
here."""

from __future__ import annotations

import re
from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

_WHOLE = re.compile(r"[0-9]{1,10}")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_WHOLE = 1_000_000_000


def _refused(text: str) -> argparse.ArgumentTypeError:
    import argparse

    return argparse.ArgumentTypeError(text)


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 30 else repr(value[:27] + "...")


def whole(minimum: int = 0) -> Callable[[str], int]:
    """A whole number from ``minimum`` up to 10**9, in ASCII digits."""
    def parse(value: str) -> int:
        text = value.strip()
        if not _WHOLE.fullmatch(text) or not minimum <= int(text) <= MAX_WHOLE:
            raise _refused(f"expected a whole number from {minimum} to {MAX_WHOLE} in ASCII "
                           f"digits; got {_shown(value)}")
        return int(text)
    parse.__name__ = "whole number"
    return parse


def seconds_above_0(value: str) -> float:
    """A finite number of seconds above 0 (``--every 60``), in ASCII digits."""
    text = value.strip()
    if re.fullmatch(r"[0-9]{1,12}(\.[0-9]{1,9})?", text) and float(text) > 0:
        return float(text)
    raise _refused(f"expected a number of seconds above 0 (60, 0.5); got {_shown(value)}")


def listen_address(value: str) -> str:
    """``[ADDR:]PORT`` with a port of ASCII digits from 0 to 65535 (the address is checked where it
    is used); the text as given."""
    _, _, port = value.rpartition(":")
    if not re.fullmatch(r"[0-9]{1,5}", port) or int(port) > 65535:
        raise _refused(f"expected [ADDR:]PORT with a port from 0 to 65535 in ASCII digits; got "
                       f"{_shown(value)}")
    return value


def job_id_text(value: str) -> str:
    """A job id to render with: what a real id can be (letters, digits, '.', '_', '-'; up to 64),
    as it names files and a rendezvous."""
    if not _ID.fullmatch(value):
        raise _refused("expected a job id of letters, digits, '.', '_' or '-' that starts with a "
                       f"letter or digit, at most 64 characters; got {_shown(value)}")
    return value


__all__ = ["job_id_text", "listen_address", "seconds_above_0", "whole"]
