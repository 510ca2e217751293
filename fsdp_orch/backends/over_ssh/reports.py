"""Watching an attempt on SSH hosts with their own disks (``shared_filesystem: false``).

Each host runs ``fsdp_orch.backends.over_ssh.node_report`` over one SSH channel for the whole attempt; a thread here
reads its lines and mirrors them into the supervisor's copy of the run folder: logs appended at the
offsets they were read at, heartbeat files replaced, the node's exit status written. Everything
downstream (the watchdog, the log classifier, ``fsdp-orch logs``, ``status``) then reads the same
files as on a shared filesystem. The stream also tells whether a host is alive: a report says
something at least every second, so a channel silent for ``SILENT_S`` is opened again (tenacity,
``backoff.REPORT_STREAM``), and a host that does not answer a new connection is lost."""

from __future__ import annotations

import base64
import json
import os
import shlex
import threading
from pathlib import Path
from typing import Any

from fsdp_orch.backends.over_ssh.attempt import SshAttempt, host_python, own_disk_run_dir
from fsdp_orch.backends.over_ssh.connect import HostKeyRejected, HostUnreachable, connect, where
from fsdp_orch.backends.over_ssh.node_report import exit_file
from fsdp_orch.launch.submission import Submission
from fsdp_orch.observe.checkpoints import Storage
from fsdp_orch.observe.heartbeats import heartbeat_path, parse_heartbeat
from fsdp_orch.vocab.backoff import REPORT_STREAM, retrying
from fsdp_orch.vocab.categories import NODE_LOST_EXIT

SILENT_S = 5.0  # node_report says something every second


class StreamSilent(Exception):
    pass


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class HostReports(threading.Thread):
    """One host's report stream, mirrored into ``local_run_dir``; ``lost`` says why the host is
    taken for lost, ``ended`` that its node script's end was reported."""

    def __init__(self, host: Any, profile: Any, job_id: str, attempt: int, rank: int, pgid: int,
                 local_run_dir: Path):
        super().__init__(daemon=True, name=f"fsdp-orch-reports-node-{rank}")
        self.host, self.profile, self.job_id = host, profile, job_id
        self.attempt, self.rank, self.pgid = attempt, rank, pgid
        self.local_run_dir = local_run_dir
        self.local_attempt = local_run_dir / f"attempt-{attempt}"
        self.offsets: dict[str, int] = {}
        self.lost: str | None = None
        self.gone: str | None = None
        self.ended = threading.Event()
        self._stop = threading.Event()
        self._conn: Any = None

    def command(self) -> str:
        words = [str(own_disk_run_dir(self.profile, self.job_id)), str(self.attempt), str(self.rank), str(self.pgid),
                 json.dumps(self.offsets, separators=(",", ":"))]
        return f"{host_python(self.profile, self.job_id)} -m fsdp_orch.backends.over_ssh.node_report {shlex.join(words)}"

    def run(self) -> None:
        # Silent, broken or ended without the node's end: a new connection decides.
        again = retrying(REPORT_STREAM, sleep=self._stop.wait,
                         stop_when=self._done,
                         transient=lambda e: not isinstance(e, (HostUnreachable, HostKeyRejected)),
                         not_yet=lambda result: True, gave_up=lambda state: None)
        try:
            again(self._follow)
        except (HostUnreachable, HostKeyRejected) as exc:
            if not self._stop.is_set():
                self.lost = f"host {where(self.host)} (node {self.rank}) stopped answering: {exc}"

    def _done(self) -> bool:
        return self._stop.is_set() or self.ended.is_set()

    def _follow(self) -> None:
        if self._done():
            return  # stopped while it waited to open the stream again
        try:
            self._stream()
        finally:
            self._close()

    def _stream(self) -> None:
        self._conn = connect(self.host, self.profile, sleep=self._stop.wait)
        channel = self._conn.client.get_transport().open_session()
        channel.settimeout(SILENT_S)
        channel.exec_command(self.command())
        pending = b""
        while not self._stop.is_set():
            try:
                data = channel.recv(1 << 16)
            except TimeoutError:
                raise StreamSilent() from None
            if not data:
                return  # the report ended: after the node's end, or killed (then it is started again)
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    self._mirror(json.loads(line))

    def _mirror(self, message: dict[str, Any]) -> None:
        if "log" in message:
            name, at, data = message["log"], int(message["at"]), base64.b64decode(message["data"])
            have = self.offsets.get(name, 0)
            if at + len(data) <= have:
                return
            data = data[have - at:] if at < have else data
            path = self.local_attempt / name
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as f:
                f.write(data)
            self.offsets[name] = max(have, at) + len(data)
        elif "beat" in message:
            beat = parse_heartbeat(message["beat"])
            write_atomically(heartbeat_path(self.local_run_dir, self.attempt, beat.rank), message["beat"].encode())
        elif "exit" in message:
            write_atomically(Path(exit_file(str(self.local_attempt), self.rank)), f"{int(message['exit'])}\n".encode())
            self.ended.set()
        elif "gone" in message:
            self.gone = str(message["gone"])
            self.ended.set()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._close()


class OwnDiskAttempt(SshAttempt):
    """An attempt on hosts with their own disks: read from the local mirror the reports keep."""

    def __init__(self, submission: Submission, attempt: int, pgids: dict[int, int], storage: Storage,
                 hosts: list[Any] | None = None, ssh: Any = None):
        local_attempt = submission.run_dir / f"attempt-{attempt}"
        super().__init__(submission, attempt, pgids, attempt_dir=local_attempt, hosts=hosts, ssh=ssh)
        self.storage = storage
        import fabric  # noqa: F401 - here, in one thread: paramiko's circular imports fail in several at once

        self.reports = {rank: HostReports(self.hosts[rank], self.profile, submission.job_id, attempt, rank, pgid,
                                          submission.run_dir)
                        for rank, pgid in pgids.items()}
        for report in self.reports.values():
            report.start()

    @property
    def checkpoints(self) -> Storage:
        return self.storage

    def _check_hosts(self, ranks: list[int]) -> int | None:
        for rank in ranks:
            report = self.reports[rank]
            if report.lost:
                self.lost = report.lost
                self.lost_ranks.add(rank)
                print(f"fsdp-orch supervisor: {self.lost}", flush=True)
                return NODE_LOST_EXIT
            if report.gone and not self._any_exit_written(ranks):
                print(f"fsdp-orch supervisor: host {where(report.host)} (node {rank}): {report.gone}", flush=True)
                return NODE_LOST_EXIT
        return None

    def stop(self, grace: float) -> None:
        super().stop(grace)
        for report in self.reports.values():
            report.stop()
