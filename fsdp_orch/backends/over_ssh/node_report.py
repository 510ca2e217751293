"""Runs on an SSH host with its own disk while an attempt runs there: follows that host's heartbeats,
logs and node exit status and reports them as JSON lines on standard output, which is the SSH channel
to the supervisor. Stdlib only (the host has the copy of fsdp_orch sent with the job).

    python -m fsdp_orch.backends.over_ssh.node_report RUN_DIR ATTEMPT NODE_RANK PGID [OFFSETS_JSON]

Lines, each a JSON object:
  {"beat": "<a heartbeat file's text>"}        a heartbeat file of a rank on this host changed
  {"log": NAME, "at": OFFSET, "data": BASE64}  a log (NAME relative to the attempt's folder) grew
  {"exit": CODE}                               the node script ended (its status file appeared)
  {"gone": "<why>"}                            the node script's process group is gone, no status
  {"alive": UNIX_TIME}                         at least every ALIVE_EVERY_S, whatever else happens

OFFSETS_JSON gives the bytes of each log the supervisor already has, so a report that reconnects
does not send them again. It ends after reporting the exit, or when the supervisor hangs up.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
from pathlib import Path

from fsdp_orch.observe.file_tail import FileTail

ALIVE_EVERY_S = 1.0
LOOK_EVERY_S = 0.5
# A node script's group that is gone while its status file is still missing: the wrapper writes
# the status just before it exits, so this long without one means it was killed.
GONE_AFTER_S = 3.0


def exit_file(attempt_dir: str, rank: int) -> str:
    return f"{attempt_dir}/exit-node-{rank}"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class NodeReport:
    def __init__(self, run_dir: str, attempt: int, rank: int, pgid: int, offsets: dict[str, int],
                 write=None, clock=time.time):  # type: ignore[no-untyped-def]
        self.attempt_dir = f"{run_dir}/attempt-{attempt}"
        self.beat_dir = Path(run_dir) / "heartbeats" / f"attempt-{attempt}"
        self.rank = rank
        self.pgid = pgid
        self.tail = FileTail(Path(self.attempt_dir), offsets=offsets)
        self.beats: dict[str, str] = {}
        self.write = write or self._write_stdout
        self.clock = clock
        self.last_sent = 0.0
        self.gone_since: float | None = None

    @staticmethod
    def _write_stdout(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def send(self, message: dict) -> None:  # type: ignore[type-arg]
        self.write(json.dumps(message, separators=(",", ":")))
        self.last_sent = self.clock()

    def look(self) -> bool:
        """Report what changed; True once the node script's end has been reported."""
        try:  # read first: once the status exists, the logs read below are whole
            code: int | None = int(Path(exit_file(self.attempt_dir, self.rank)).read_text().strip())
        except (OSError, ValueError):
            code = None
        for name, data in self.tail.chunks():
            at = self.tail.offsets[Path(self.attempt_dir) / name] - len(data)
            self.send({"log": name, "at": at, "data": base64.b64encode(data).decode()})
        try:
            names = sorted(os.listdir(self.beat_dir))
        except OSError:
            names = []
        for name in names:
            if not (name.startswith("rank-") and name.endswith(".json")):
                continue
            try:
                text = (self.beat_dir / name).read_text(encoding="utf-8")
            except OSError:
                continue
            if text and self.beats.get(name) != text:
                self.beats[name] = text
                self.send({"beat": text})
        if code is not None:
            self.send({"exit": code})
            return True
        if self.pgid and not group_alive(self.pgid):
            now = self.clock()
            if self.gone_since is None:
                self.gone_since = now
            if now - self.gone_since >= GONE_AFTER_S:
                self.send({"gone": f"the node script (process group {self.pgid}) ended without an exit status"})
                return True
        if self.clock() - self.last_sent >= ALIVE_EVERY_S:
            self.send({"alive": self.clock()})
        return False


def _end_when_stdin_closes() -> None:
    """The supervisor hung up (or died): nothing is left to report to."""
    sys.stdin.buffer.read()
    os._exit(0)


def main(argv: list[str]) -> int:
    run_dir, attempt, rank, pgid = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    offsets = json.loads(argv[4]) if len(argv) > 4 else {}
    threading.Thread(target=_end_when_stdin_closes, daemon=True).start()
    report = NodeReport(run_dir, attempt, rank, pgid, offsets)
    try:
        while not report.look():
            time.sleep(LOOK_EVERY_S)
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
