"""The per-job event log: append-only JSON lines in ``runs/<id>/events/``, one file per writer (the
CLI process that submitted, each supervisor process, each CLI that settled or cancelled the job), so
no two processes ever append to the same file, on any filesystem.

Readers go by byte offset and take whole lines only. A line without its newline is not read yet (its
writer may still be writing it, or died mid-write: then it is never completed and never read); a
whole line that is not an event is skipped with a warning naming the file and the line. Stdlib only.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

EVENTS_DIR = "events"
CANCEL_MARKER = "cancel-requested"


def events_dir(run_dir: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(run_dir), EVENTS_DIR)


def writer_name(role: str) -> str:
    """A file name no other process uses: the role, the host, the pid and a random part."""
    import socket

    host = socket.gethostname().split(".")[0] or "host"
    return f"{role}-{host}-{os.getpid()}-{os.urandom(3).hex()}.jsonl"


class EventWriter:
    """Appends events to one file of its own; each event is one ``write`` of one whole line."""

    def __init__(self, run_dir: str | os.PathLike[str], role: str,
                 clock: Callable[[], float] = time.time):
        from fsdp_orch.places.private import make_private_dirs

        directory = events_dir(run_dir)
        make_private_dirs(directory)
        self.path = os.path.join(directory, writer_name(role))
        self.clock = clock
        self._seq = 0
        self._fd: int | None = None

    def append(self, kind: str, at: float | None = None, **fields: object) -> dict[str, object]:
        import json

        self._seq += 1
        event = {"at": self.clock() if at is None else at, "kind": kind, "seq": self._seq, **fields}
        line = (json.dumps(event, separators=(",", ":"), allow_nan=False, default=str)
                + "\n").encode()
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(self._fd, line)
        return event

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class ReadResult:
    """What a read found: the events, where the next read starts (after the last whole line), how
    many whole lines are behind that point, and the warnings.
    (No dataclass: ``status`` starts here.)"""

    def __init__(self, events: list[dict] | None = None, offset: int = 0,  # type: ignore[type-arg]
                 line: int = 0, warnings: list[str] | None = None):
        self.events = events or []
        self.offset = offset
        self.line = line
        self.warnings = warnings or []


def parse_lines(data: bytes, path: str,
                first_line: int) -> tuple[list[dict[str, Any]], int, int, list[str]]:
    """The events in ``data`` (read from ``path`` at line ``first_line``): (events, bytes consumed,
    whole lines consumed, warnings). Pure."""
    import json

    events, warnings = [], []
    consumed = 0
    lines = 0
    while True:
        end = data.find(b"\n", consumed)
        if end < 0:
            break
        raw = data[consumed:end]
        consumed = end + 1
        lines += 1
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("kind"), str) \
                or not isinstance(event.get("at"), (int, float)):
            warnings.append(f"{path}:{first_line + lines}: skipped a line that is not an event")
            continue
        events.append(event)
    return events, consumed, lines, warnings


def read_from(path: str, offset: int = 0, line: int = 0) -> ReadResult:
    """The whole lines appended to ``path`` since ``offset`` (``line`` whole lines before it)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return ReadResult(offset=offset, line=line)
    events, consumed, lines, warnings = parse_lines(data, path, line)
    return ReadResult(events, offset + consumed, line + lines, warnings)


def event_files(run_dir: str | os.PathLike[str]) -> list[str]:
    """The job's event files, the submitting CLI's first (it creates the job). Only files of this
    user that no one else can write, in an events folder of the same kind, are taken (a file
    another account planted is never read)."""
    from fsdp_orch.places.private import untrusted

    directory = events_dir(run_dir)
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    if untrusted(directory, [os.fspath(run_dir)]):
        return []
    names = sorted(n for n in names if n.endswith(".jsonl"))
    names.sort(key=lambda n: not n.startswith("submit-"))
    paths = [os.path.join(directory, n) for n in names]
    return [p for p in paths if untrusted(p, [directory]) is None]


def order_key(event: dict, path: str) -> tuple:  # type: ignore[type-arg]
    """Where ``event`` (read from ``path``) stands among its job's events: the submission first
    (another host's clock may be behind), then by time; ties by writer file (the submitting CLI's
    first), then the writer's sequence. Every reader folds in this order."""
    name = os.path.basename(path)
    return (event["kind"] != "submitted", float(event["at"]), not name.startswith("submit-"), name,
            int(event.get("seq") or 0))


def read_keyed(run_dir: str | os.PathLike[str], offsets: dict[str, tuple[int, int]]
               ) -> tuple[list[tuple[list, dict]], list[str]]:  # type: ignore[type-arg]
    """The job's events appended since ``offsets`` (file -> (byte offset, lines); updated to where
    each file was read), each as (``order_key`` as a list, event),
    in that order; and the warnings."""
    events, warnings = [], []
    for path in event_files(run_dir):
        result = read_from(path, *offsets.get(path, (0, 0)))
        offsets[path] = (result.offset, result.line)
        warnings += result.warnings
        events += [(list(order_key(e, path)), e) for e in result.events]
    events.sort(key=lambda item: item[0])
    return events, warnings


def read_new(run_dir: str | os.PathLike[str], offsets: dict[str, tuple[int, int]]
             ) -> tuple[list[dict], list[str]]:  # type: ignore[type-arg]
    """As ``read_keyed``, the events without their keys."""
    keyed, warnings = read_keyed(run_dir, offsets)
    return [e for _, e in keyed], warnings


def read_job(run_dir: str | os.PathLike[str]
             ) -> tuple[list[dict], list[str]]:  # type: ignore[type-arg]
    """Every event of the job in time order, and the warnings."""
    return read_new(run_dir, {})


__all__ = ["CANCEL_MARKER", "EVENTS_DIR", "EventWriter", "ReadResult", "event_files", "events_dir",
           "order_key", "parse_lines", "read_from", "read_job", "read_keyed", "read_new",
           "writer_name"]
