"""Runs on an SSH host (or TPU VM worker) while an attempt runs there: follows that node's heartbeats,
logs and node exit status and reports them as JSON lines on standard output, which is the SSH channel
to the supervisor. Stdlib only (a host with its own disk has only the copy of fsdp_orch sent with the job).

    python -m fsdp_orch.backends.over_ssh.node_report [--beats-only] [--job-id JOB] RUN_DIR ATTEMPT NODE_RANK PGID [OFFSETS_JSON]

The heartbeats are read from the node's own beat folder in node-local tmp (``node_beat_dir``, computed
here: the uid on the host may not be the supervisor's), never from the run folder. ``--job-id``
defaults to RUN_DIR's last part (the run folder is ``<root>/runs/<job id>``). ``--beats-only``: the
hosts share the run folder with the supervisor, which reads the logs and exit files there itself;
only the heartbeats, the liveness and the end are reported (the exit file is still read, to end).

Lines, each a JSON object:
  {"beat": "<a heartbeat file's text>"}        a heartbeat file of a rank on this node changed, or
                                               was not rewritten for HELD_AFTER_S (``held_since`` added)
  {"log": NAME, "at": OFFSET, "data": BASE64}  a log (NAME relative to the attempt's folder) grew
  {"exit": CODE}                               the node script ended (its status file appeared),
                                               sent after the heartbeats and logs read with it
  {"gone": "<why>"}                            the node script's process group is gone, no status
  {"alive": UNIX_TIME}                         at least every ALIVE_EVERY_S, whatever else happens

OFFSETS_JSON gives the bytes of each log the supervisor already has, so a report that reconnects
does not send them again. It ends after reporting the exit, or when the supervisor hangs up.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fsdp_orch.nodeagent.beat_dir import node_beat_dir
from fsdp_orch.observe.file_tail import FileTail
from fsdp_orch.observe.heartbeats import held_since

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
                 write: Callable[[str], None] | None = None, clock: Callable[[], float] = time.time, *,
                 job_id: str | None = None, beats_only: bool = False, beat_dir: str | None = None):
        """``beat_dir``: where this node's ranks write their heartbeats (default: ``node_beat_dir``
        of the job, attempt and node rank, on this host)."""
        self.attempt_dir = f"{run_dir}/attempt-{attempt}"
        job = job_id or os.path.basename(os.path.normpath(run_dir))
        self.beat_dir = Path(beat_dir or node_beat_dir(job, attempt, rank))
        self.rank = rank
        self.pgid = pgid
        self.tail = None if beats_only else FileTail(Path(self.attempt_dir), offsets=offsets)
        self.beats: dict[str, str] = {}
        self.held: set[str] = set()  # beat files reported as no longer rewritten (held_since)
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

    def _held_text(self, text: str) -> str | None:
        """The heartbeat with ``held_since`` added, once its file has not been rewritten for a while
        (read with this host's clock: the ranks' own); None while it is fresh."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        held = held_since(data, self.clock())
        if held is None:
            return None
        return json.dumps({**data, "held_since": held}, separators=(",", ":"))

    def look(self) -> bool:
        """Report what changed; True once the node script's end has been reported."""
        try:  # read first: once the status exists, the logs read below are whole
            code: int | None = int(Path(exit_file(self.attempt_dir, self.rank)).read_text().strip())
        except (OSError, ValueError):
            code = None
        if self.tail is not None:
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
                self.held.discard(name)
                self.send({"beat": text})
            elif text and name not in self.held and (held := self._held_text(text)) is not None:
                self.held.add(name)  # once per silence: the next rewrite clears it
                self.send({"beat": held})
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
    parser = argparse.ArgumentParser(prog="python -m fsdp_orch.backends.over_ssh.node_report")
    parser.add_argument("--beats-only", action="store_true")
    parser.add_argument("--job-id")
    parser.add_argument("run_dir")
    parser.add_argument("attempt", type=int)
    parser.add_argument("rank", type=int)
    parser.add_argument("pgid", type=int)
    parser.add_argument("offsets", nargs="?", default="{}")
    args = parser.parse_args(argv)
    threading.Thread(target=_end_when_stdin_closes, daemon=True).start()
    report = NodeReport(args.run_dir, args.attempt, args.rank, args.pgid, json.loads(args.offsets),
                        job_id=args.job_id, beats_only=args.beats_only)
    try:
        while not report.look():
            time.sleep(LOOK_EVERY_S)
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    # Not a normal exit: the thread still blocked reading stdin would make the interpreter's shutdown
    # abort (SIGABRT, "could not acquire lock for <stdin>") once the node's end has been reported.
    os._exit(code)
