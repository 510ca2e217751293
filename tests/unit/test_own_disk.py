"""SSH hosts with their own disks (``shared_filesystem: false``), the pure parts: the profile rule,
the archive sent to every host, what a host reports and how the supervisor mirrors it, and the
checkpoint folder rules of a rank that does not see rank 0's folder. The whole path runs on the
namespace hosts in tests/ssh/test_ssh_own_disks.py."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from planning import plan_on, render

from fsdp_orch.backends.over_ssh.node_report import GONE_AFTER_S, NodeReport
from fsdp_orch.backends.over_ssh.reports import HostReports
from fsdp_orch.backends.over_ssh.staging import CODE_LIMIT_BYTES, job_archive
from fsdp_orch.backends.registry import parse_profile
from fsdp_orch.jobspec.loading import load_job
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.nodeagent.summary import compact, parse_summary, summary_line
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.runtime import ckpt_files
from fsdp_orch.vocab.errors import FsdpOrchError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[2]


def own_disk_plan(job_dir: Path):  # type: ignore[no-untyped-def]
    job, _ = load_job(FIXTURES / "jobs" / "script.yaml", ["nodes=2"])
    profile = parse_profile(FIXTURES / "clusters" / "ssh-own-disks.yaml")
    ctx = PlanContext(job_id="j1", attempt=0, run_root="/home/me/.fsdp-orch", job_dir=str(job_dir),
                      bootstrap_dir="/opt/site")
    return plan_on(job, profile, "own", ctx)


def test_without_a_shared_filesystem_the_profile_needs_an_absolute_remote_workdir(
        tmp_path: Path) -> None:
    profile = tmp_path / "own.yaml"
    profile.write_text("kind: ssh\nhosts: [{address: h1}]\nshared_filesystem: false\n"
                       "remote_workdir: work\n")
    proc = subprocess.run([sys.executable, "-m", "fsdp_orch", "render", "--cluster", str(profile),
                           str(REPO / "examples" / "demo" / "job.yaml")], capture_output=True,
                          text=True)
    assert proc.returncode == 2, proc.stderr
    assert (f"{profile}:4: remote_workdir: with shared_filesystem: false, expected an absolute "
            "folder") in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_hosts_run_the_job_from_their_own_folder(tmp_path: Path) -> None:
    plan = own_disk_plan(tmp_path)
    run = "/scratch/fsdp-orch/runs/j1"
    assert (plan.run_dir, plan.attempt_dir, plan.workdir) == (run, f"{run}/attempt-0",
                                                              f"{run}/code")
    assert plan.checkpoint_dir.startswith(f"{run}/code/")
    assert (plan.package_dir, plan.bootstrap_dir) == (f"{run}/lib",
                                                      f"{run}/lib/fsdp_orch/bootstrap/site")
    assert all(not a.path.startswith("/home/me") for a in render(plan))


def test_the_archive_holds_fsdp_orch_the_jobs_folder_and_the_attempts_files(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "tokens.txt").write_text("a b c\n")
    for left_out in (".git/config", "__pycache__/train.cpython-311.pyc",
                     "checkpoints/golden-demo/step-00000005/x"):
        (tmp_path / left_out).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / left_out).write_text("not code")
    plan = own_disk_plan(tmp_path)
    artifacts = render(plan)
    with tarfile.open(fileobj=io.BytesIO(job_archive(plan, artifacts, str(tmp_path)))) as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert archive.extractfile(  # type: ignore[union-attr]
            members["code/train.py"]).read() == b"print('hi')\n"
    assert "code/data/tokens.txt" in members
    assert not [n for n in members
                if n.startswith(("code/.git", "code/__pycache__", "code/checkpoints"))]
    assert ("lib/fsdp_orch/backends/over_ssh/node_report.py" in members
            and "lib/fsdp_orch/runtime/checkpoint.py" in members)
    assert not [n for n in members if "__pycache__" in n or n.endswith(".pyc")]
    assert members["attempt-0/node-1.sh"].mode == 0o700 and members["job.json"].mode == 0o600


def test_a_jobs_folder_full_of_data_is_refused_naming_it(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fsdp_orch.backends.over_ssh.staging.CODE_LIMIT_BYTES", 1000)
    (tmp_path / "big.bin").write_bytes(b"x" * 2000)
    plan = own_disk_plan(tmp_path)
    with pytest.raises(FsdpOrchError,
                       match=f"{tmp_path} holds more than 0 MiB to copy to every host"):
        job_archive(plan, render(plan), str(tmp_path))
    assert CODE_LIMIT_BYTES == 256 * 2**20


def beat(rank: int, step: int) -> Heartbeat:
    return Heartbeat(rank=rank, attempt=0, step=step, loss=1.0, time=100.0 + step, state="training",
                     pid=7)


FIELDS = ["node", "host", "attempt", "at", "beats", "final"]  # a node summary's


def summary(node: int, at: float, *beats: Heartbeat, final: bool = False) -> dict:
    """The node summary a host's report sends with ``beats``, decoded (host "h1")."""
    wire = [compact(json.loads(b.to_json()), at) for b in beats]
    return json.loads(summary_line(node, "h1", at, wire, final=final))


def test_a_host_reports_log_growth_beats_and_then_its_exit(tmp_path: Path) -> None:
    run = tmp_path / "run"
    attempt = run / "attempt-0"
    attempt.mkdir(parents=True)
    (attempt / "console-node-1.log").write_bytes(b"already sent\n")
    lines: list[dict] = []
    # the node's beat folder (node-local tmp: test_node_report.py)
    beats = tmp_path / "node-tmp" / "node-1"
    report = NodeReport(str(run), 0, 1, 0, {"console-node-1.log": 5},
                        write=lambda line: lines.append(json.loads(line)), clock=lambda: 0.0,
                        beat_dir=str(beats), host="h1")
    beats.mkdir(parents=True)
    (beats / "rank-1.json").write_text(beat(1, 3).to_json())
    assert report.look() is False
    assert lines == [{"log": "console-node-1.log", "at": 5,
                      "data": base64.b64encode(b"dy sent\n").decode()},
                     summary(1, 0.0, beat(1, 3))]
    assert parse_summary(lines[1]).beats == {1: replace(beat(1, 3), time=0.0, host="h1", node=1)}
    lines.clear()
    assert report.look() is False and lines == []  # nothing new, and the last line was just now
    with open(attempt / "console-node-1.log", "ab") as f:
        f.write(b"last words\n")
    (attempt / "exit-node-1").write_text("3\n")
    assert report.look() is True
    assert [list(m) for m in lines] == [["log", "at", "data"], FIELDS, ["exit"]]
    assert lines[1] == summary(1, 0.0, final=True) and lines[-1] == {"exit": 3}


def test_a_node_script_killed_without_a_status_is_reported_gone(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "0"], start_new_session=True)
    child.wait()  # its process group no longer exists
    now = [0.0]
    lines: list[dict] = []
    report = NodeReport(str(tmp_path), 0, 0, child.pid, {},
                        write=lambda line: lines.append(json.loads(line)), clock=lambda: now[0])
    assert report.look() is False
    now[0] = GONE_AFTER_S + 0.1
    assert report.look() is True and "gone" in lines[-1] and str(child.pid) in lines[-1]["gone"]
    assert parse_summary(lines[-2]).final  # the last summary, then why the node ended


def test_the_supervisor_mirrors_a_report_once_even_when_it_comes_again(tmp_path: Path) -> None:
    reports = HostReports(host=None, profile=None, job_id="j1", attempt=0, rank=1, pgid=9,
                          node_timeout=30.0, local_run_dir=tmp_path)

    def log(at: int, data: bytes) -> dict:
        return {"log": "console-node-1.log", "at": at, "data": base64.b64encode(data).decode()}

    for message in (log(0, b"hello "), log(0, b"hello "), log(3, b"lo world\n"),
                    log(6, b"world\nmore\n")):
        reports._mirror(message)
    assert (tmp_path / "attempt-0" / "console-node-1.log").read_bytes() == b"hello world\nmore\n"
    reports._mirror(summary(1, 9.0, beat(1, 4)))
    # kept in memory, never a file in the run folder
    assert reports.heartbeats() == {1: replace(beat(1, 4), time=9.0, host="h1", node=1)}
    assert not (tmp_path / "heartbeats").exists()
    assert not reports.ended.is_set()
    reports._mirror({"exit": 0})
    assert (tmp_path / "attempt-0" / "exit-node-1").read_text() == "0\n" and reports.ended.is_set()


def test_a_rank_on_its_own_disk_keeps_only_the_step_folders_rank_0_kept(tmp_path: Path) -> None:
    for step in (5, 10, 15, 20):
        (tmp_path / f"step-{step:08d}").mkdir()
    (tmp_path / "notes").mkdir()
    current = tmp_path / "step-00000020"
    ckpt_files.drop_step_dirs_not_in(tmp_path, ["step-00000010", "step-00000015"], protect=current)
    assert sorted(os.listdir(tmp_path)) == ["notes", "step-00000010", "step-00000015",
                                            "step-00000020"]
    assert not ckpt_files.is_prepared(current)
    ckpt_files.mark_prepared(current)
    assert ckpt_files.is_prepared(current)
    assert ckpt_files.step_dirs(tmp_path) == ["step-00000010", "step-00000015", "step-00000020"]
