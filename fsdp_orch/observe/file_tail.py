"""What an attempt's log files gained since the last look, by byte offset. Stdlib only: it also runs
on SSH hosts with their own disks (``node_report``)."""

from __future__ import annotations

from pathlib import Path

from fsdp_orch.observe.attempt_files import LOG_PATTERNS

# (where the text came from, e.g. "console-node-0.log"; the bytes appended since the last call)
LogChunk = tuple[str, bytes]


class FileTail:
    """What files matching ``patterns`` under ``root`` gained since
    the last call, by byte offset."""

    def __init__(self, root: Path, patterns: tuple[str, ...] = LOG_PATTERNS,
                 offsets: dict[str, int] | None = None):
        self.root = root
        self.patterns = patterns
        self.offsets: dict[Path, int] = {root / name: at for name, at in (offsets or {}).items()}

    def chunks(self) -> list[LogChunk]:
        found: set[Path] = set()
        for pattern in self.patterns:
            found.update(self.root.glob(pattern))
        out = []
        for path in sorted(found):
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets.get(path, 0))
                    data = f.read()
                    self.offsets[path] = f.tell()
            except OSError:
                continue
            if data:
                out.append((path.relative_to(self.root).as_posix(), data))
        return out
