"""What the doc generators (``gen_cli_reference.py``, ``gen_layout.py``, ``gen_reference.py``)
share: a page's generated block replaced between its markers, and the page written, or with
``--check`` compared (exit 1, one line naming what to run, when it differs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def page(current: str, generated: str, begin: str, end: str) -> str:
    """``current`` with its generated part (``generated`` starts at ``begin`` and ends at ``end``)
    replaced by ``generated``; appended when it has none."""
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        return head + generated + rest.split(end, 1)[1]
    return current.rstrip("\n") + "\n\n" + generated + "\n"


def write_or_check(out: Path, text: str, stale: str) -> int:
    """Write ``text`` to ``out``; with ``--check`` on the command line, only compare, and say
    ``stale`` when they differ."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    if parser.parse_args().check:
        if not out.is_file() or out.read_text(encoding="utf-8") != text:
            print(stale, file=sys.stderr)
            return 1
        return 0
    out.write_text(text, encoding="utf-8")
    return 0


__all__ = ["page", "write_or_check"]
