"""Watching an attempt through the reports its SSH hosts send back.

Each host runs ``fsdp_orch.backends.over_ssh.node_report`` over one SSH channel for the whole
attempt; a thread here (``HostReports``) reads its lines. The heartbeats it reports (read on the
host from its node-local beat folder) come as the node agents' summary lines, read by the same
``nodeagent.summary.parse_summary`` as the node channel's; they are kept in memory, the latest of
each rank: nothing is written under the run folder for them. On hosts with their own disks
(``shared_filesystem: false``, and TPU VM workers) the logs are mirrored into the supervisor's copy
of the run folder, appended at the offsets they were read at, and the node's exit status written
there, so the watchdog, the log classifier, ``fsdp-orch logs`` and ``status`` read the same files
as on a shared filesystem. On hosts that share the run folder the report runs ``--logs-on-node``:
the exit files are there already, and each node keeps its logs, copied into the run folder every few
seconds (``nodeagent.node_logs``); what they gain comes over the stream, kept in memory for the
watchdog (``log_chunks``). The stream also tells whether a host is alive: a report says
something at least every second, so a channel silent for ``SILENT_S`` is opened again (tenacity,
``backoff.REPORT_STREAM``), and a host that does not answer a new connection is lost."""

from __future__ import annotations

import base64
import json
import logging
import posixpath
import shlex
import threading
import time
from pathlib import Path
from typing import Any

from fsdp_orch.backends.base import CHANNEL_SILENT_S
from fsdp_orch.backends.over_ssh.attempt import (
    SshAttempt,
    fsdp_orch_python,
    host_python,
    own_disk_run_dir,
)
from fsdp_orch.backends.over_ssh.connect import HostKeyRejected, HostUnreachable, connect, where
from fsdp_orch.backends.over_ssh.node_report import exit_file
from fsdp_orch.checkpoints.storage import Storage
from fsdp_orch.launch.submission import Submission
from fsdp_orch.nodeagent.log_backlog import LogBacklog, unseen
from fsdp_orch.nodeagent.summary import parse_summary
from fsdp_orch.observe.file_tail import LogChunk
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.places.private import write_atomically
from fsdp_orch.vocab.backoff import REPORT_STREAM, retrying
from fsdp_orch.vocab.categories import NODE_LOST_EXIT

log = logging.getLogger(__name__)
SILENT_S = 5.0  # node_report says something every second
# A host that answers SSH but whose report has said nothing for the job's watch.node_timeout is lost
# all the same (its node script or filesystem stuck, or the host paused that long): the
# supervisor's hang rule waits while a report is silent.
# After a node's exit status appeared: how long its report may take to bring the last heartbeats.
REPORTS_SETTLE_S = 3.0


class StreamSilent(Exception):
    pass


def write_report(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, data)


class HostReports(threading.Thread):
    """One host's report stream: its logs and exit status mirrored into ``local_run_dir`` (with
    ``logs_on_node``, what the logs gain kept in memory: ``log_chunks``), its ranks' latest
    heartbeats kept in memory (``heartbeats``); ``lost`` says why the host is taken for lost,
    ``ended`` that its node script's end was reported.

    ``run_dir``: the job's run folder as the host sees it (default: the one on its own disk);
    ``python``: the shell words that run python with fsdp_orch importable there (default:
    ``host_python``)."""

    def __init__(self, host: Any, profile: Any, job_id: str, attempt: int, rank: int, pgid: int,
                 local_run_dir: Path, *, node_timeout: float, logs_on_node: bool = False,
                 run_dir: str | None = None, python: str | None = None):
        super().__init__(daemon=True, name=f"fsdp-orch-reports-node-{rank}")
        self.host, self.profile, self.job_id = host, profile, job_id
        self.attempt, self.rank, self.pgid = attempt, rank, pgid
        self.local_run_dir = local_run_dir
        self.local_attempt = local_run_dir / f"attempt-{attempt}"
        self.logs_on_node = logs_on_node
        self._logs = LogBacklog()  # what the node's logs gained (logs_on_node), until log_chunks
        self.node_timeout = node_timeout
        self.run_dir, self.python = run_dir, python
        self.offsets: dict[str, int] = {}
        self._beats: dict[int, Heartbeat] = {}
        self._beats_lock = threading.Lock()
        self.lost: str | None = None
        self.gone: str | None = None
        self.note: str | None = None  # its node-local folder was taken (the report's "note")
        self.ended = threading.Event()
        # The thread ended (set last in run(): also after a stream that was never opened).
        self.finished = threading.Event()
        self._halt = threading.Event()
        self._conn: Any = None
        # when the host last said something (from the start: connecting)
        self.heard_at = time.monotonic()

    def command(self) -> str:
        run_dir = self.run_dir or str(own_disk_run_dir(self.profile, self.job_id))
        words = ["--job-id", self.job_id, *(["--logs-on-node"] if self.logs_on_node else []),
                 run_dir, str(self.attempt), str(self.rank), str(self.pgid),
                 json.dumps(self.offsets, separators=(",", ":"))]
        python = self.python or host_python(self.profile, self.job_id)
        return f"{python} -m fsdp_orch.backends.over_ssh.node_report {shlex.join(words)}"

    def heartbeats(self) -> dict[int, Heartbeat]:
        """The latest heartbeat this host reported of each of its ranks."""
        with self._beats_lock:
            return dict(self._beats)

    def log_chunks(self) -> list[LogChunk]:
        """What the node's logs gained since the last call (``logs_on_node``)."""
        with self._beats_lock:
            return self._logs.take()

    def run(self) -> None:
        # Silent, broken or ended without the node's end: a new connection decides.
        again = retrying(REPORT_STREAM, sleep=self._halt.wait,
                         stop_when=self._done,
                         transient=lambda e: not isinstance(e, (HostUnreachable, HostKeyRejected)),
                         not_yet=lambda result: True, gave_up=lambda state: None)
        try:
            again(self._follow)
        except (HostUnreachable, HostKeyRejected) as exc:
            if not self._halt.is_set():
                self.lost = f"host {where(self.host)} (node {self.rank}) stopped answering: {exc}"
        finally:
            self.finished.set()

    def _done(self) -> bool:
        return self._halt.is_set() or self.ended.is_set()

    def _follow(self) -> None:
        if self._done():
            return  # stopped while it waited to open the stream again
        silent = time.monotonic() - self.heard_at
        if silent > self.node_timeout:
            raise HostUnreachable(f"its report stream said nothing for {silent:.0f}s though the "
                                  f"host answers SSH (watch.node_timeout "
                                  f"{self.node_timeout:g}s)")
        try:
            self._stream()
        finally:
            self._close()

    def _stream(self) -> None:
        self._conn = connect(self.host, self.profile, sleep=self._halt.wait)
        channel = self._conn.client.get_transport().open_session()
        channel.settimeout(SILENT_S)
        channel.exec_command(self.command())
        pending = b""
        while not self._halt.is_set():
            try:
                data = channel.recv(1 << 16)
            except TimeoutError:
                raise StreamSilent() from None
            self.heard_at = time.monotonic()
            if not data:
                # the report ended: after the node's end, or killed (then it is started again)
                return
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    self._mirror(json.loads(line))

    def _mirror(self, message: dict[str, Any]) -> None:
        if "log" in message:
            name, at, data = message["log"], int(message["at"]), base64.b64decode(message["data"])
            data, self.offsets[name] = unseen(self.offsets.get(name, 0), at, data)
            if not data:
                return
            if self.logs_on_node:
                with self._beats_lock:
                    self._logs.add(name, data)
                return
            path = self.local_attempt / name
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as f:
                f.write(data)
        elif "beats" in message:  # a node summary, the node agents' line (nodeagent.summary)
            try:
                summary = parse_summary(message)
            except ValueError:
                return  # not a summary after all: the next one brings the ranks again
            with self._beats_lock:
                self._beats.update(summary.beats)
        elif "exit" in message:
            if not self.logs_on_node:  # on a shared run folder the node wrote it there itself
                write_report(Path(exit_file(str(self.local_attempt), self.rank)),
                                 f"{int(message['exit'])}\n".encode())
            self.ended.set()
        elif "gone" in message:
            self.gone = str(message["gone"])
            self.ended.set()
        elif "note" in message:
            self.note = str(message["note"])

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self._halt.set()
        self._close()


class ReportedAttempt(SshAttempt):
    """An SSH attempt whose hosts each run a report stream (``HostReports``) for it: the heartbeats
    (``heartbeats``) are the merge of what the reports brought. ``MIRROR``: the reports bring the
    logs and exit statuses too (hosts with their own disks); else they run ``--logs-on-node``."""

    MIRROR = False

    def __init__(self, submission: Submission, attempt: int, pgids: dict[int, int],
                 attempt_dir: Path | None = None, hosts: list[Any] | None = None, ssh: Any = None):
        super().__init__(submission, attempt, pgids, attempt_dir=attempt_dir, hosts=hosts, ssh=ssh)
        # here, in one thread: paramiko's circular imports fail in several at once
        import fabric  # noqa: F401

        job_id = submission.job_id
        shared_fs: dict[str, Any] = {}
        if not self.MIRROR:
            # the run folder as the hosts see it; fsdp_orch from where their bootstrap is
            shared_fs = {"logs_on_node": True,
                         "run_dir": posixpath.dirname(submission.attempt_dir(attempt)),
                         "python": fsdp_orch_python(self.profile, job_id,
                                                    submission.base_plan.bootstrap_dir)}
        self.reports = {rank: HostReports(self.hosts[rank], self.profile, job_id, attempt, rank,
                                          pgid, submission.run_dir,
                                          node_timeout=submission.job.watch.node_timeout,
                                          **shared_fs)
                        for rank, pgid in pgids.items()}
        for report in self.reports.values():
            report.start()

    def log_chunks(self) -> list[LogChunk]:
        """The run folder's (the wrappers' output), then what the nodes' logs gained."""
        chunks = self._tail.chunks()
        for report in self.reports.values():
            chunks += report.log_chunks()
        return chunks

    def heartbeats(self) -> dict[int, Heartbeat]:
        """The latest heartbeat of every rank, merged over the hosts' reports."""
        beats: dict[int, Heartbeat] = {}
        for report in self.reports.values():
            beats.update(report.heartbeats())
        return dict(sorted(beats.items()))

    def node_notes(self) -> dict[int, str]:
        """What each host's report said of its node-local folder (taken by another account)."""
        return {rank: report.note for rank, report in sorted(self.reports.items())
                if report.note is not None}

    def silent_nodes(self) -> dict[int, float]:
        """The hosts whose report stream has said nothing for ``CHANNEL_SILENT_S`` while it should
        (not ended, not yet found lost): reconnecting, or about to be found lost."""
        now = time.monotonic()
        return {rank: now - report.heard_at for rank, report in self.reports.items()
                if not report.ended.is_set() and not report.finished.is_set()
                and now - report.heard_at > CHANNEL_SILENT_S}

    def poll(self) -> int | None:
        code = super().poll()
        if code is not None:
            self._reports_settle()
        return code

    def _reports_settle(self) -> None:
        """The reports of the nodes whose exit status is in end once they sent the heartbeats they
        read with it: wait for them (``REPORTS_SETTLE_S`` at most), so that the last steps and
        states count."""
        deadline = time.monotonic() + REPORTS_SETTLE_S
        for rank, report in self.reports.items():
            if not Path(exit_file(str(self.attempt_dir), rank)).exists():
                continue
            while (not report.finished.is_set() and not report.ended.is_set()
                    and time.monotonic() < deadline):
                report.ended.wait(0.1)

    def stop(self, grace: float) -> None:
        super().stop(grace)
        for report in self.reports.values():
            report.stop()


class SharedFsAttempt(ReportedAttempt):
    """An attempt on hosts that share the run folder with the supervisor: the exit statuses are read
    there; the reports, ``--logs-on-node``, bring the heartbeats and what the logs gain (both kept
    node-local on each host), and copy the logs into the run folder."""

    LOGS_ON_NODE = True


class OwnDiskAttempt(ReportedAttempt):
    """An attempt on hosts with their own disks: read from the local mirror the reports keep."""

    MIRROR = True

    def __init__(self, submission: Submission, attempt: int, pgids: dict[int, int],
                 storage: Storage, hosts: list[Any] | None = None, ssh: Any = None):
        local_attempt = submission.run_dir / f"attempt-{attempt}"
        super().__init__(submission, attempt, pgids, attempt_dir=local_attempt, hosts=hosts,
                         ssh=ssh)
        self.storage = storage

    @property
    def checkpoints(self) -> Storage:
        return self.storage

    def _check_hosts(self, ranks: list[int]) -> int | None:
        for rank in ranks:
            report = self.reports[rank]
            if report.lost:
                self.lost = report.lost
                self.lost_ranks.add(rank)
                log.info(f"fsdp-orch supervisor: {self.lost}")
                return NODE_LOST_EXIT
            if report.gone and not self._any_exit_written(ranks):
                log.info(f"fsdp-orch supervisor: host {where(report.host)} (node {rank}): "
                         f"{report.gone}")
                return NODE_LOST_EXIT
        return None
