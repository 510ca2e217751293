"""A node's console and its ranks' log files, kept on the node (SLURM: the node-local folder of its
heartbeats), where torchrun appending each line to the shared run folder made about 10 file changes
a second per job: its agent sends the supervisor what they gain (the lines a verdict is read from),
and copies them into the run folder at most every ``COPY_EVERY_S`` and at its end, so that
``fsdp-orch logs`` reads them there as before, a few seconds late while the attempt runs.

On the node: ``<folder>/console.log`` (node.sh's own output, torchrun's tee'd rank lines) and
``<folder>/logs/<run id>/attempt_0/<local rank>/{stdout,stderr}.log`` (torchrun's ``--log-dir``).
In the run folder: ``console-node-<N>.log`` and ``node-<N>/<run id>/...``, the names the supervisor
and ``logs`` always read. Each run-folder copy has one writer, this agent. Stdlib only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from fsdp_orch.places.private import make_private_dirs, open_private

COPY_EVERY_S = 5.0
# What one file may send the supervisor per look (LOOK_EVERY_S): past it, the newest bytes (a
# traceback ends a log) and the rest only in the run folder's copy.
SEND_AT_MOST = 256 * 1024
CONSOLE = "console.log"
RANK_LOGS = "logs"
_RANK_FILES = ("*/attempt_*/*/stdout.log", "*/attempt_*/*/stderr.log")


class NodeLogs:
    def __init__(self, node: int, folder: Path, attempt_dir: Path,
                 clock: Callable[[], float] = time.monotonic):
        self.node, self.folder, self.attempt_dir, self.clock = node, folder, attempt_dir, clock
        self.sent: dict[str, int] = {}  # run-folder name: bytes sent to the supervisor
        self.copied: dict[str, int] = {}  # run-folder name: bytes in the run folder's copy
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
        """Append to each run-folder copy what it lacks, when COPY_EVERY_S have passed since the
        last copy (``final``: now); the number of files changed."""
        now = self.clock()
        if not final and now - self._copied_at < COPY_EVERY_S:
            return 0
        self._copied_at = now
        changed = 0
        for name, path in self.files().items():
            have = self.copied.get(name, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(have)
                    data = f.read()
            except OSError:
                continue
            if not data and name in self.copied:
                continue
            target = self.attempt_dir / name
            make_private_dirs(str(target.parent))
            fd = open_private(str(target), os.O_WRONLY | os.O_APPEND)
            with os.fdopen(fd, "ab") as out:
                out.write(data)
            self.copied[name] = have + len(data)
            changed += 1
        return changed


__all__ = ["COPY_EVERY_S", "NodeLogs", "SEND_AT_MOST"]
