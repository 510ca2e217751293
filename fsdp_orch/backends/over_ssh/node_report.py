"""Runs on an SSH host (or TPU VM worker) while an attempt runs there: follows that node's
heartbeats, logs and node exit status and reports them as JSON lines on standard output, which is
the SSH channel to the supervisor. Stdlib only (a host with its own disk has only the copy of
fsdp_orch sent with the job).

    python -m fsdp_orch.backends.over_ssh.node_report [--logs-on-node] [--job-id JOB]
        RUN_DIR ATTEMPT NODE_RANK PGID [OFFSETS_JSON]

The heartbeats are read from the node's own beat folder in node-local tmp (``node_beat_dir``,
computed here: the uid on the host may not be the supervisor's), never from the run folder.
``--job-id`` defaults to RUN_DIR's last part (the run folder is ``<root>/runs/<job id>``).
``--logs-on-node``: the hosts share the run folder with the supervisor, which reads the exit files
there itself (they are still read here, to end). The node keeps its console and its ranks' logs in
its beat folder (``nodeagent.node_logs``): what they gain is reported, and copied into the run
folder every few seconds (whole at the end by the node's wrapper, or by the stop command).

Lines, each a JSON object:
  {"node": N, "host": ..., "attempt": A, "at": T, "beats": [...], "final": BOOL}
      a node summary, the node agents' line (``nodeagent.summary``, encoded by its ``compact``,
      ``changed_beats`` and ``summary_line``, read by its ``parse_summary``): the ranks whose
      heartbeat changed, ``held_since`` added (with this host's clock) once a file was not
      rewritten for HELD_AFTER_S; at least every ALIVE_EVERY_S (with no beats: the liveness);
      ``final`` on the last, just before the exit or gone line
  {"log": NAME, "at": OFFSET, "data": BASE64}
      a log (NAME relative to the attempt's folder) grew
  {"note": TEXT}
      the node's ``fsdp-orch-<uid>`` was someone else's, and which folder it uses instead
  {"exit": CODE}
      the node script ended (its status file appeared), sent after the heartbeats and logs read
      with it
  {"gone": "<why>"}
      the node script's process group is gone, no status

OFFSETS_JSON gives the bytes of each log the supervisor already has, so a report that reconnects
does not send them again. It ends after reporting the exit, or when the supervisor hangs up.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fsdp_orch.nodeagent.beat_dir import (
    moved_beat_dir,
    node_beat_dir,
    read_beat_files,
    taken_note,
)
from fsdp_orch.nodeagent.node_logs import NodeLogs
from fsdp_orch.nodeagent.summary import (
    changed_beats,
    compact,
    summary_line,
    with_process_states,
)
from fsdp_orch.observe.file_tail import FileTail
from fsdp_orch.observe.process_state import ProcessStates

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
                 write: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.time, *, job_id: str | None = None,
                 logs_on_node: bool = False, beat_dir: str | None = None,
                 host: str | None = None, states: ProcessStates | None = None):
        """``beat_dir``: where this node's ranks write their heartbeats (default: ``node_beat_dir``
        of the job, attempt and node rank, on this host); ``host``: this host's name in the
        summaries (default: ``socket.gethostname()``, as the node agent's); ``states``: reads the
        process state of a rank whose heartbeat stands still (``observe.process_state``)."""
        self.attempt_dir = f"{run_dir}/attempt-{attempt}"
        job = job_id or os.path.basename(os.path.normpath(run_dir))
        self.beat_dir = Path(beat_dir or node_beat_dir(job, attempt, rank))
        # until the node script says which node-local folder it made (moved_beat_dir)
        self._looking_for_move = not beat_dir
        self._job = job
        self.attempt, self.rank, self.pgid = attempt, rank, pgid
        self.host = host or socket.gethostname()
        self.tail = None if logs_on_node else FileTail(Path(self.attempt_dir), offsets=offsets)
        self.node_logs = (NodeLogs(rank, self.beat_dir, Path(self.attempt_dir), sent=offsets)
                          if logs_on_node else None)
        self.sent: dict[int, dict[str, Any]] = {}  # the ranks' compact heartbeats, as last sent
        self.write = write or self._write_stdout
        self.clock = clock
        self.last_sent = 0.0
        self.gone_since: float | None = None
        self.states = states

    @staticmethod
    def _write_stdout(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def send_line(self, line: str) -> None:
        self.write(line)
        self.last_sent = self.clock()

    def send(self, message: dict) -> None:  # type: ignore[type-arg]
        self.send_line(json.dumps(message, separators=(",", ":")))

    def _follow_moved_folder(self) -> None:
        """The node's /tmp/fsdp-orch-<uid> was someone else's: its script made a private folder
        beside it and wrote its path here, in the job's own run folder; the ranks beat there."""
        if not self._looking_for_move:
            return
        said = moved_beat_dir(self.attempt_dir, self._job, self.attempt, self.rank)
        if said is None:
            return  # not written (yet): the usual folder
        self._looking_for_move = False
        self.beat_dir = Path(said)
        if self.node_logs is not None:
            self.node_logs.folder = self.beat_dir
        note = taken_note(self.attempt_dir, self.rank)
        if note is not None:
            self.send({"note": note})

    def look(self) -> bool:
        """Report what changed; True once the node script's end has been reported."""
        code = self._exit_code()  # read first: once the status exists, what is read below is whole
        self._follow_moved_folder()
        self._send_logs()
        now = self.clock()
        beats = read_beat_files(str(self.beat_dir))
        current = with_process_states({rank: compact(beat, now) for rank, beat in beats.items()},
                                      self.states, now)
        gone = None if code is not None else self._gone(now)
        ending = code is not None or gone is not None
        changed = changed_beats(current, self.sent)
        if changed or ending or now - self.last_sent >= ALIVE_EVERY_S:
            self.send_line(summary_line(self.rank, self.host, now, changed, final=ending,
                                        attempt=self.attempt))
            self.sent = current
        if code is not None:
            self.send({"exit": code})
        elif gone is not None:
            self.send({"gone": gone})
        return ending

    def _exit_code(self) -> int | None:
        try:
            return int(Path(exit_file(self.attempt_dir, self.rank)).read_text().strip())
        except (OSError, ValueError):
            return None

    def _send_logs(self) -> None:
        if self.node_logs is not None:
            for name, at, data in self.node_logs.new_text():
                self.send({"log": name, "at": at, "data": base64.b64encode(data).decode()})
            self.node_logs.copy()
            return
        if self.tail is None:
            return
        for name, data in self.tail.chunks():
            at = self.tail.offsets[Path(self.attempt_dir) / name] - len(data)
            self.send({"log": name, "at": at, "data": base64.b64encode(data).decode()})

    def _gone(self, now: float) -> str | None:
        """Why the node script is taken for ended without a status: its process group has been
        gone for GONE_AFTER_S; None while it runs (or was gone for less)."""
        if not self.pgid or group_alive(self.pgid):
            return None
        if self.gone_since is None:
            self.gone_since = now
        if now - self.gone_since < GONE_AFTER_S:
            return None
        return f"the node script (process group {self.pgid}) ended without an exit status"


def _end_when_stdin_closes() -> None:
    """The supervisor hung up (or died): nothing is left to report to."""
    sys.stdin.buffer.read()
    os._exit(0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m fsdp_orch.backends.over_ssh.node_report")
    parser.add_argument("--logs-on-node", action="store_true")
    parser.add_argument("--job-id")
    parser.add_argument("run_dir")
    parser.add_argument("attempt", type=int)
    parser.add_argument("rank", type=int)
    parser.add_argument("pgid", type=int)
    parser.add_argument("offsets", nargs="?", default="{}")
    args = parser.parse_args(argv)
    threading.Thread(target=_end_when_stdin_closes, daemon=True).start()
    report = NodeReport(args.run_dir, args.attempt, args.rank, args.pgid, json.loads(args.offsets),
                        job_id=args.job_id, logs_on_node=args.logs_on_node,
                        states=ProcessStates())
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
    # Not a normal exit: the thread still blocked reading stdin would make the interpreter's
    # shutdown abort (SIGABRT, "could not acquire lock for <stdin>") once the node's end has been
    # reported.
    os._exit(code)
