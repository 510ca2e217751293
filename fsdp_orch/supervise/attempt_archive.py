"""What the run folder keeps of an ended attempt's logs, so that its growth per attempt is bounded
however long each attempt ran (issue 60, "the long run").

Once an attempt has ended and the supervisor has decided on a restart, each of its logs
(``observe.attempt_files.LOG_PATTERNS``: every node's console, torchrun's per-rank stdout and
stderr) is replaced by ``<name>.gz`` holding its first ``HEAD_BYTES`` and its last ``TAIL_BYTES``,
cut at line ends, with one line in between saying how many bytes were left out (a log smaller than
both is kept whole). The head holds what the script said at start (configuration, warnings); the
tail holds the failure (the traceback, the collective that timed out), which the attempt's failure
event already quotes. The flight recorder's dumps of a hung attempt
(``flight_recorder_rank_<N>``, pickles of a bounded ring of collectives: 140 KiB a rank on the
demo, 16 KiB gzipped) are gzipped whole: ``gunzip`` gives torch's ``fr_trace`` its files back.
Stacks and the small files of the attempt (its launch script, ``ranks.json``) stay as they are.
The attempt a job ends with is never archived: it is the evidence of the end.

:func:`plan_cuts` and :func:`trimmed` decide (pure); :func:`archive_attempt` does it for one attempt
of a run folder; :func:`open_log` and :func:`read_log` read a log either way (``fsdp-orch logs``,
``fsdp-orch diagnose``). Stdlib only.
"""

from __future__ import annotations

import gzip
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from fsdp_orch.observe.attempt_files import LOG_PATTERNS
from fsdp_orch.observe.nccl_env import FLIGHT_RECORDER_PREFIXES

HEAD_BYTES = 64 * 1024  # what a log said first
TAIL_BYTES = 256 * 1024  # and last: a traceback, a timed-out collective, NCCL's last words
GZ = ".gz"
GZIP_LEVEL = 6
# gzipped whole: a pickle cannot be cut
WHOLE_PATTERNS = tuple(f"{prefix}*" for prefix in FLIGHT_RECORDER_PREFIXES)


@dataclass(frozen=True)
class LogCut:
    """One log of an ended attempt, and what of it is kept: its first ``head`` bytes and its last
    ``tail`` bytes (before the cut to line ends)."""

    path: str  # relative to the attempt's folder
    size: int
    head: int
    tail: int

    @property
    def whole(self) -> bool:
        return self.head + self.tail >= self.size


def plan_cuts(logs: dict[str, int], head: int = HEAD_BYTES, tail: int = TAIL_BYTES,
              whole: frozenset[str] = frozenset()) -> list[LogCut]:
    """``logs``: each log's path (relative to its attempt's folder) and size. A log of at most
    ``head + tail`` bytes, or one named in ``whole``, is kept whole; a larger one, its head and
    tail. Pure."""
    cuts = []
    for path, size in sorted(logs.items()):
        if size <= head + tail or path in whole:
            cuts.append(LogCut(path, size, size, 0))
        else:
            cuts.append(LogCut(path, size, head, tail))
    return cuts


def trimmed(first: bytes, last: bytes, size: int) -> bytes:
    """A log of ``size`` bytes as kept: ``first`` (its first bytes) cut back to its last line end,
    a line saying how many bytes were left out, then ``last`` (its last bytes) from its first line
    start on. A chunk without a line end is kept as it is. Pure."""
    end = first.rfind(b"\n")
    head = first[:end + 1] if end >= 0 else first
    start = last.find(b"\n")
    tail = last[start + 1:] if 0 <= start < len(last) - 1 else last
    left_out = size - len(head) - len(tail)
    if left_out <= 0:
        return head + tail
    note = (f"[fsdp-orch] {left_out} bytes of this log left out here: an ended attempt keeps the "
            f"first {len(head)} and the last {len(tail)} (supervise/attempt_archive.py)\n")
    return head + note.encode() + tail


@dataclass(frozen=True)
class Archived:
    """What :func:`archive_attempt` did: the logs archived, their bytes before and after."""

    logs: int
    bytes_before: int
    bytes_after: int


def attempt_logs(attempt_dir: Path,
                 patterns: tuple[str, ...] = LOG_PATTERNS + WHOLE_PATTERNS) -> dict[str, int]:
    """The attempt's logs (and flight-recorder dumps) not archived yet (a log copied again after it
    was archived counts: it is the later, whole copy), with their sizes."""
    found: dict[str, int] = {}
    for pattern in patterns:
        for path in attempt_dir.glob(pattern):
            try:
                if path.is_file() and not path.is_symlink() and not is_archived(path):
                    found[path.relative_to(attempt_dir).as_posix()] = path.stat().st_size
            except OSError:
                continue
    return found


def archive_attempt(run_dir: str | os.PathLike[str], attempt: int, *, head: int = HEAD_BYTES,
                    tail: int = TAIL_BYTES) -> Archived:
    """Archive the logs of ``attempt`` in ``run_dir`` (``attempt-<N>/``): each one is replaced by
    ``<name>.gz``, trimmed to its head and tail (flight-recorder dumps whole), written beside it
    and renamed into place before the log is removed (one that cannot be read is left as it is).
    Reads at most ``head + tail`` bytes of each log, whatever its size (a dump, all of it).
    Idempotent: archived logs are not touched again."""
    attempt_dir = Path(run_dir) / f"attempt-{attempt}"
    before = after = done = 0
    whole = frozenset(attempt_logs(attempt_dir, WHOLE_PATTERNS))
    for cut in plan_cuts(attempt_logs(attempt_dir), head, tail, whole):
        path = attempt_dir / cut.path
        try:
            kept = _kept_bytes(path, cut)
            written = _write_gz(path, kept)
        except OSError:
            continue
        before += cut.size
        after += written
        done += 1
    return Archived(done, before, after)


def _kept_bytes(path: Path, cut: LogCut) -> bytes:
    with open(path, "rb") as f:
        if cut.whole:
            return f.read()
        first = f.read(cut.head)
        f.seek(max(cut.size - cut.tail, cut.head))
        return trimmed(first, f.read(cut.tail), cut.size)


def _write_gz(path: Path, data: bytes) -> int:
    """``path.gz`` holding ``data`` (0600, the log's times), then ``path`` removed; its size."""
    target = path.with_name(path.name + GZ)
    tmp = path.with_name(f".{path.name}{GZ}.tmp")
    stat = path.stat()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(filename=path.name, mode="wb",
                                                      fileobj=raw, compresslevel=GZIP_LEVEL,
                                                      mtime=int(stat.st_mtime)) as gz:
            gz.write(data)
        os.utime(tmp, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    path.unlink()
    return target.stat().st_size


def is_archived(path: str | os.PathLike[str]) -> bool:
    return os.fspath(path).endswith(GZ)


def open_log(path: str | os.PathLike[str]) -> IO[str]:
    """A log for reading as text, archived (``.gz``) or not."""
    if is_archived(path):
        return io.TextIOWrapper(gzip.open(path, "rb"), errors="replace")
    return open(path, errors="replace")


def read_log(path: str | os.PathLike[str]) -> bytes:
    """A log's bytes: decompressed when it is gzip (by its first bytes, whatever its name)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError):
            return data
    return data


__all__ = ["Archived", "HEAD_BYTES", "LogCut", "TAIL_BYTES", "WHOLE_PATTERNS", "archive_attempt",
           "attempt_logs", "is_archived", "open_log", "plan_cuts", "read_log", "trimmed"]
