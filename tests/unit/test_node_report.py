"""The SSH hosts' report stream and the heartbeats: ``node_report`` reads a node's heartbeats from
its beat folder in node-local tmp (``node_beat_dir``, never the run folder), and the supervisor's
``HostReports`` keeps the latest of each rank in memory, writing no heartbeat file. The whole path
runs on the namespace hosts in tests/ssh/."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fsdp_orch.backends.over_ssh.node_report import NodeReport
from fsdp_orch.backends.over_ssh.reports import HostReports, ReportedAttempt
from fsdp_orch.nodeagent.beat_dir import node_beat_dir, user_tmp_root
from fsdp_orch.nodeagent.summary import compact, parse_summary, summary_line
from fsdp_orch.observe.heartbeats import Heartbeat, heartbeat_path

REPO = Path(__file__).resolve().parents[2]
HOST = "h1"


def beat(rank: int, step: int, state: str = "training") -> Heartbeat:
    return Heartbeat(rank=rank, attempt=2, step=step, loss=1.0, time=100.0 + step, state=state,
                     pid=7)


def relayed(b: Heartbeat, at: float, host: str = HOST, node: int = 0) -> Heartbeat:
    """``b`` as the supervisor reads it from node ``node``'s summary line sent at ``at``."""
    return replace(b, time=at, host=host, node=node)


def summary(node: int, at: float, *beats: Heartbeat, final: bool = False) -> dict[str, Any]:
    """The summary line a node's relay sends with ``beats`` (the node agents' encoder), decoded."""
    wire = [compact(json.loads(b.to_json()), at) for b in beats]
    return json.loads(summary_line(node, HOST, at, wire, final=final, attempt=2))


def beats_in(lines: list[dict]) -> list[Heartbeat]:
    """The heartbeats the report's summary lines carry, read by the one reader of summaries."""
    return [b for line in lines if "beats" in line for b in parse_summary(line).beats.values()]


@pytest.fixture
def job_id() -> Iterator[str]:
    """A job id of its own, whose beat folders in this machine's node-local tmp go afterwards."""
    job = f"jtest{uuid.uuid4().hex[:10]}"
    yield job
    shutil.rmtree(Path(user_tmp_root()) / job, ignore_errors=True)


def write_beat(job: str, node: int, b: Heartbeat) -> None:
    folder = Path(node_beat_dir(job, b.attempt, node))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank-{b.rank}.json").write_text(b.to_json())


def reporter(run: Path, node: int,  # type: ignore[no-untyped-def]
             **kwargs) -> tuple[NodeReport, list[dict]]:
    lines: list[dict] = []
    report = NodeReport(str(run), 2, node, 0, {}, write=lambda line: lines.append(json.loads(line)),
                        clock=lambda: 0.0, host=HOST, **kwargs)
    return report, lines


def test_the_report_reads_its_nodes_beat_folder_in_node_local_tmp(tmp_path: Path,
                                                                  job_id: str) -> None:
    run = tmp_path / "runs" / job_id  # the run folder's name is the job id
    (run / "attempt-2").mkdir(parents=True)
    write_beat(job_id, 1, beat(3, 5))
    write_beat(job_id, 0, beat(0, 9))  # another node's (a shared /tmp): not this report's
    (Path(node_beat_dir(job_id, 2, 1)) / "rank-3.json.tmp").write_text("half")
    (Path(node_beat_dir(job_id, 2, 1)) / "rank-5.json").write_text('{"rank": 5, "ha')  # mid-write
    stale = heartbeat_path(run, 2, 4)  # the run folder's heartbeats are no longer read
    stale.parent.mkdir(parents=True)
    stale.write_text(beat(4, 1).to_json())
    report, lines = reporter(run, 1)
    assert report.beat_dir == Path(
        f"/tmp/fsdp-orch-{__import__('os').getuid()}/{job_id}/attempt-2/node-1")
    assert report.look() is False
    assert lines == [summary(1, 0.0, beat(3, 5))]  # the node agents' line, byte for byte
    assert beats_in(lines) == [relayed(beat(3, 5), 0.0, node=1)]
    lines.clear()
    assert report.look() is False and lines == []  # unchanged: not sent again
    write_beat(job_id, 1, beat(3, 6))
    assert report.look() is False and beats_in(lines) == [relayed(beat(3, 6), 0.0, node=1)]


def test_a_beat_file_not_rewritten_is_reported_held_once_and_fresh_again_when_it_is(
        tmp_path: Path, job_id: str) -> None:
    # The rank's watcher rewrites its file every 0.5 s unless the interpreter is held (a native call
    # that keeps the GIL): then its file stands still, and the report says since when, once.
    now = [105.2]
    lines: list[dict] = []
    report = NodeReport(str(tmp_path / job_id), 2, 0, 0, {},
                        write=lambda line: lines.append(json.loads(line)), clock=lambda: now[0],
                        logs_on_node=True, host=HOST)
    host = HostReports(host=None, profile=None, job_id=job_id, attempt=2, rank=0, pgid=9,
                       node_timeout=30.0, local_run_dir=tmp_path)
    write_beat(job_id, 0, beat(0, 5))  # written at 105.0
    report.look()
    assert beats_in(lines) == [relayed(beat(0, 5), 105.2)]
    lines.clear()
    now[0] = 105.7
    report.look()
    assert lines == []  # 0.7 s: a write late by less than half a tick
    now[0] = 105.8
    report.look()
    [line] = lines
    assert [b["held_since"] for b in line["beats"]] == [105.0]  # read with the host's clock
    host._mirror(line)
    assert host.heartbeats() == {0: replace(relayed(beat(0, 5), 105.8), held_since=105.0)}
    lines.clear()
    now[0] = 130.0
    report.look()
    assert beats_in(lines) == [] and lines[0]["beats"] == []  # once per silence: liveness only
    write_beat(job_id, 0, replace(beat(0, 6), time=129.9))  # rewritten: the interpreter let go
    report.look()
    assert beats_in(lines) == [relayed(beat(0, 6), 130.0)]
    host._mirror(lines[-1])
    assert host.heartbeats()[0].held_since is None
    lines.clear()
    write_beat(job_id, 0, beat(0, 7, "done"))  # a rank that is done no longer writes: never held
    report.look()
    now[0] = 200.0
    report.look()
    assert beats_in(lines) == [relayed(beat(0, 7, "done"), 130.0)]


def test_the_job_id_can_be_given_when_the_run_folder_is_not_named_after_it(tmp_path: Path,
                                                                           job_id: str) -> None:
    write_beat(job_id, 0, beat(0, 2))
    report, lines = reporter(tmp_path / "elsewhere", 0, job_id=job_id)
    report.look()
    assert beats_in(lines) == [relayed(beat(0, 2), 0.0)]


def test_logs_on_node_are_sent_and_copied_and_the_report_ends_at_the_exit_after_the_last_beats(
        tmp_path: Path, job_id: str) -> None:
    """Hosts that share the run folder: the node's console and rank logs are in its beat folder;
    the report sends what they gain (the supervisor keeps it in memory) and copies them into the
    run folder at once, then every few seconds; the wrapper's own output stays where it is."""
    run = tmp_path / job_id
    (run / "attempt-2").mkdir(parents=True)
    (run / "attempt-2" / "ssh-node-0.log").write_text("the wrapper's\n")
    folder = Path(node_beat_dir(job_id, 2, 0))
    (folder / "logs" / "r1" / "attempt_0" / "0").mkdir(parents=True)
    (folder / "console.log").write_bytes(b"step=1\n")
    (folder / "logs" / "r1" / "attempt_0" / "0" / "stderr.log").write_bytes(b"warn\n")
    report, lines = reporter(run, 0, logs_on_node=True)
    assert report.look() is False
    assert lines == [{"log": "console-node-0.log", "at": 0, "data": "c3RlcD0xCg=="},
                     {"log": "node-0/r1/attempt_0/0/stderr.log", "at": 0, "data": "d2Fybgo="}]
    copy = run / "attempt-2" / "console-node-0.log"
    assert copy.read_bytes() == b"step=1\n"
    host = HostReports(host=None, profile=None, job_id=job_id, attempt=2, rank=0, pgid=9,
                       node_timeout=30.0, local_run_dir=tmp_path / "supervisor",
                       logs_on_node=True)
    for line in lines:
        host._mirror(line)
    assert host.log_chunks() == [("console-node-0.log", b"step=1\n"),
                                 ("node-0/r1/attempt_0/0/stderr.log", b"warn\n")]
    assert host.log_chunks() == []  # taken once
    lines.clear()
    with open(folder / "console.log", "ab") as f:
        f.write(b"step=2\n")
    write_beat(job_id, 0, beat(0, 20, "done"))
    (run / "attempt-2" / "exit-node-0").write_text("0\n")
    assert report.look() is True
    assert lines == [{"log": "console-node-0.log", "at": 7, "data": "c3RlcD0yCg=="},
                     summary(0, 0.0, beat(0, 20, "done"), final=True), {"exit": 0}]
    assert parse_summary(lines[1]).final  # the last summary says so, before the end
    assert copy.read_bytes() == b"step=1\n"  # within COPY_EVERY_S: the wrapper copies the rest
    host._mirror(lines[0])
    host._mirror({"log": "console-node-0.log", "at": 0, "data": "c3RlcD0xCg=="})  # resent: dropped
    assert host.log_chunks() == [("console-node-0.log", b"step=2\n")]
    assert not (tmp_path / "supervisor").exists()  # nothing written by the supervisor's side
    assert (run / "attempt-2" / "ssh-node-0.log").read_text() == "the wrapper's\n"


def test_the_module_runs_on_a_host_with_the_hosts_arguments(tmp_path: Path, job_id: str) -> None:
    """What HostReports runs over SSH, as a process: its words, its lines, its end."""
    run = tmp_path / "shared" / "runs" / job_id
    (run / "attempt-2").mkdir(parents=True)
    write_beat(job_id, 1, beat(1, 7, "done"))
    (run / "attempt-2" / "exit-node-1").write_text("0\n")
    reports = HostReports(host=None, profile=None, job_id=job_id, attempt=2, rank=1, pgid=0,
                          node_timeout=30.0, local_run_dir=tmp_path / "supervisor",
                          logs_on_node=True, run_dir=str(run),
                          python=f"PYTHONPATH={REPO} {sys.executable}")
    command = reports.command()
    assert command.endswith(f"node_report --job-id {job_id} --logs-on-node {run} 2 1 0 '{{}}'")
    proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    out = proc.stdout.read()  # type: ignore[union-attr]
    proc.stdin.close()  # type: ignore[union-attr]
    assert proc.wait(timeout=30) == 0
    for line in out.splitlines():
        reports._mirror(json.loads(line))
    *_, last, end = out.splitlines()
    assert json.loads(last)["final"] is True and json.loads(end) == {"exit": 0}
    [got] = reports.heartbeats().values()
    assert reports.ended.is_set()
    assert got == relayed(beat(1, 7, "done"), got.time, socket.gethostname(), node=got.node)
    assert got.node is not None
    assert not (tmp_path / "supervisor").exists()  # nothing mirrored: no heartbeat, no exit file


def test_the_supervisor_keeps_the_latest_beats_in_memory_and_merges_the_hosts(
        tmp_path: Path) -> None:
    def host(rank: int) -> HostReports:
        return HostReports(host=None, profile=None, job_id="j1", attempt=2, rank=rank, pgid=9,
                           node_timeout=30.0, local_run_dir=tmp_path)

    first, second = host(0), host(1)
    first._mirror(summary(0, 10.0, beat(0, 4), beat(1, 4)))
    first._mirror(summary(0, 11.0, beat(0, 5)))
    first._mirror({**summary(0, 12.0), "beats": [{"rank": 0, "half": 1}]})  # not a beat: dropped
    first._mirror({**summary(0, 12.0, beat(0, 6)), "node": "?"})  # not a summary: skipped whole
    first._mirror(summary(0, 13.0))  # liveness only: no beat changed
    second._mirror(summary(1, 10.0, beat(2, 3)))
    assert first.heartbeats() == {0: relayed(beat(0, 5), 11.0), 1: relayed(beat(1, 4), 10.0)}
    attempt = ReportedAttempt.__new__(ReportedAttempt)  # only its reports matter here
    attempt.reports = {0: first, 1: second}
    assert attempt.heartbeats() == {0: relayed(beat(0, 5), 11.0), 1: relayed(beat(1, 4), 10.0),
                                    2: relayed(beat(2, 3), 10.0, node=1)}
    assert list(tmp_path.iterdir()) == []  # no heartbeat file anywhere under the run folder


class ScriptedHost(HostReports):
    """A report stream that brings the node's last beat, then its end, with no SSH channel."""

    def __init__(self, local_run_dir: Path, rank: int, last: Heartbeat):
        super().__init__(host=None, profile=None, job_id="j1", attempt=2, rank=rank, pgid=9,
                         node_timeout=30.0, local_run_dir=local_run_dir, logs_on_node=True)
        self.last = last

    def _stream(self) -> None:
        self._mirror(summary(self.rank, 50.0, self.last, final=True))
        self._mirror({"exit": 0})


def test_an_attempt_whose_nodes_ended_waits_for_their_reports_last_beats(tmp_path: Path) -> None:
    attempt_dir = tmp_path / "attempt-2"
    attempt_dir.mkdir()
    attempt = ReportedAttempt.__new__(ReportedAttempt)
    attempt.attempt_dir, attempt.pgids = attempt_dir, {0: 11, 1: 12}
    attempt.reports = {rank: ScriptedHost(tmp_path, rank, beat(rank, 20, "done"))
                       for rank in (0, 1)}
    for rank in (0, 1):
        (attempt_dir / f"exit-node-{rank}").write_text("0\n")  # on the shared run folder
    for report in attempt.reports.values():
        report.start()
    assert attempt.poll() == 0
    assert attempt.heartbeats() == {0: relayed(beat(0, 20, "done"), 50.0),
                                    1: relayed(beat(1, 20, "done"), 50.0, node=1)}
    for report in attempt.reports.values():
        assert report.finished.wait(5)  # (not join: HostReports' _stop hides threading.Thread's)
    attempt._reports_settle()  # ended threads: no wait, no error
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["attempt-2", "exit-node-0",
                                                           "exit-node-1"]


def test_the_report_reads_beats_from_the_folder_made_in_place_of_a_taken_one(
        tmp_path: Path, job_id: str) -> None:
    """A host's /tmp/fsdp-orch-<uid> was another account's: its launch script made a private folder
    beside it (mktemp -d) and wrote that folder's path in the node's log folder; the ranks beat
    there, and so the report reads there (it read the taken folder, and found no rank)."""
    moved = tmp_path / "fsdp-orch-0-abcdefgh"
    run = tmp_path / job_id
    (run / "attempt-2" / "node-0").mkdir(parents=True)
    lines: list[dict] = []
    report = NodeReport(str(run), 2, 0, 0, {}, write=lambda line: lines.append(json.loads(line)),
                        clock=lambda: 105.2, logs_on_node=True, host=HOST)
    b = beat(0, 5)
    folder = moved / job_id / "attempt-2" / "node-0"
    folder.mkdir(parents=True)
    (folder / "rank-0.json").write_text(b.to_json())
    report.look()
    assert beats_in(lines) == []  # no note yet: the usual folder, where no rank beats
    (run / "attempt-2" / "node-0" / "node_tmp_moved").write_text(f"{moved}\n")
    lines.clear()
    report.look()
    assert beats_in(lines) == [relayed(b, 105.2)]
