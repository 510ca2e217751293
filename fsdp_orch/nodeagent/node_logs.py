"""A node's console and its ranks' log files, kept on the node (the node-local folder of its
heartbeats; SLURM, and SSH hosts that share the run folder), where torchrun appending each line to
the shared run folder made about 10 file changes a second per job: its agent (an SSH host's report)
sends the supervisor what they gain (the lines a verdict is read from), and copies the console into
the run folder at most every ``COPY_EVERY_S``, and everything at its end, so that ``fsdp-orch logs``
reads them there as before, a few seconds late while the attempt runs.

On the node: ``<folder>/console.log`` (node.sh's own output, torchrun's tee'd rank lines) and
``<folder>/logs/<run id>/attempt_0/<local rank>/{stdout,stderr}.log`` (torchrun's ``--log-dir``).
In the run folder: ``console-node-<N>.log`` and ``node-<N>/<run id>/...``, the names the supervisor
and ``logs`` always read. Stdlib only.

Each copy resumes at the run-folder file's own size, under a lock on the node (``COPY_LOCK``), so
that several copiers of one node take turns and never append twice: on SLURM the agent; on SSH
hosts the host's report while the attempt runs, then its node wrapper at the end (or the stop
command, when the supervisor stops it), through ``python -m fsdp_orch.nodeagent.node_logs``:

    python -m fsdp_orch.nodeagent.node_logs ATTEMPT_DIR JOB_ID ATTEMPT NODE_RANK
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fsdp_orch.nodeagent.beat_dir import found_beat_dir
from fsdp_orch.places.private import make_private_dirs, open_private

COPY_EVERY_S = 5.0
# What one file may send the supervisor per look (LOOK_EVERY_S): past it, the newest bytes (a
# traceback ends a log) and the rest only in the run folder's copy.
SEND_AT_MOST = 256 * 1024
CONSOLE = "console.log"
RANK_LOGS = "logs"
_RANK_FILES = ("*/attempt_*/*/stdout.log", "*/attempt_*/*/stderr.log")
COPY_LOCK = ".copy.lock"


class NodeLogs:
    def __init__(self, node: int, folder: Path, attempt_dir: Path,
                 clock: Callable[[], float] = time.monotonic, sent: dict[str, int] | None = None):
        """``sent``: the bytes of each log the supervisor already has (a report that reconnects)."""
        self.node, self.folder, self.attempt_dir, self.clock = node, folder, attempt_dir, clock
        self.sent: dict[str, int] = dict(sent or {})  # run-folder name: bytes the supervisor has
        self._copied_at = float("-inf")

    def files(self) -> dict[str, Path]:
        """{run-folder name: node-local path} of the logs there are now."""
        found = {}
        console = self.folder / CONSOLE
        if console.is_file():
            found[f"console-node-{self.node}.log"] = console
        ranks = self.folder / RANK_LOGS
        for pattern in _RANK_FILES:
            for path in ranks.glob(pattern):
                found[f"node-{self.node}/{path.relative_to(ranks).as_posix()}"] = path
        return dict(sorted(found.items()))

    def new_text(self) -> list[tuple[str, int, bytes]]:
        """(name, offset, bytes) of what each log gained since the last call, at most SEND_AT_MOST
        of each: where it gained more, its newest bytes (the offset says where they begin)."""
        out = []
        for name, path in self.files().items():
            have = self.sent.get(name, 0)
            try:
                size = path.stat().st_size
                if size <= have:
                    continue
                start = max(have, size - SEND_AT_MOST)
                with open(path, "rb") as f:
                    f.seek(start)
                    data = f.read(size - start)
            except OSError:
                continue
            self.sent[name] = start + len(data)
            out.append((name, start, data))
        return out

    def copy(self, final: bool = False) -> int:
        """Append to the console's run-folder copy what it lacks, when COPY_EVERY_S have passed
        since the last copy; ``final``: now, and the ranks' own files too. The number of files
        changed. While the attempt runs the console is enough: it has every rank's lines, tagged
        with the rank (torchrun's ``--tee``), which is what ``logs`` and ``logs --rank`` read; the
        ranks' files, copied as they grew, were a third of the run folder's changes."""
        now = self.clock()
        if not final and now - self._copied_at < COPY_EVERY_S:
            return 0
        self._copied_at = now
        files = self.files()
        if not final:
            files = {name: path for name, path in files.items() if name.startswith("console-")}
        if not files:
            return 0
        with _copy_lock(self.folder):
            return sum(self._copy_one(self.attempt_dir / name, path)
                       for name, path in files.items())

    @staticmethod
    def _copy_one(target: Path, path: Path) -> int:
        try:
            have = target.stat().st_size
        except FileNotFoundError:
            have = None
        except OSError:
            return 0
        try:
            with open(path, "rb") as f:
                f.seek(have or 0)
                data = f.read()
        except OSError:
            return 0
        if not data and have is not None:
            return 0
        make_private_dirs(str(target.parent))
        fd = open_private(str(target), os.O_WRONLY | os.O_APPEND)
        with os.fdopen(fd, "ab") as out:
            out.write(data)
        return 1


class _copy_lock:
    """An exclusive lock on the node's log folder (``COPY_LOCK`` in it), held while copying."""

    def __init__(self, folder: Path):
        self.path = folder / COPY_LOCK

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def copy_at_end(attempt_dir: str, job_id: str, attempt: int, node: int) -> int:
    """Node ``node``'s logs whole into the run folder (the copies finished); the files changed."""
    folder = Path(found_beat_dir(attempt_dir, job_id, attempt, node))
    if not folder.is_dir():
        return 0
    return NodeLogs(node, folder, Path(attempt_dir)).copy(final=True)


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m fsdp_orch.nodeagent.node_logs ATTEMPT_DIR JOB_ID ATTEMPT "
              "NODE_RANK", file=sys.stderr)
        return 2
    attempt_dir, job_id, attempt, node = argv
    copy_at_end(attempt_dir, job_id, int(attempt), int(node))
    return 0


__all__ = ["COPY_EVERY_S", "NodeLogs", "SEND_AT_MOST", "copy_at_end"]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
