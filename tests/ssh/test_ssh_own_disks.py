"""`shared_filesystem: false` on the real sshd hosts (tests/ssh/hosts.sh): each host keeps the job
on a disk of its own (a tmpfs in its mount namespace that no other host and not this machine sees),
and the submitting side (FSDP_ORCH_HOME, the job's folder) lives in a folder the hosts cannot see.
So the job only runs if fsdp-orch copies it over, and the supervisor only sees it through the
reports its hosts send back over SSH."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from cli_harness import UNTIL_STOPPED, Cli, copy_demo, demo_args, make_cli, notices, why
from taken_node_folder import (  # noqa: F401 (the fixture)
    check_the_taken_folder,
    private_folders_removed,
    taken_on_host_2,
)

from fsdp_orch.nodeagent.beat_dir import node_beat_dir

pytestmark = [pytest.mark.slow, pytest.mark.root]

TWO_HOSTS = ["--set", "nodes=2", "--set", "procs_per_node=1", "--set", "checkpoint.interval=5",
             "--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0",
             "--set", "watch.heartbeat_timeout=10s", "--set", "watch.startup_timeout=120s"]


@pytest.fixture
def apart(ssh_hosts) -> Iterator[tuple[Cli, Path]]:  # type: ignore[no-untyped-def]
    """A CLI and a copy of the demo in the folder the hosts cannot see, with the own-disks profile
    (this interpreter as the hosts' python); after the test, no process of its jobs on any host."""
    base = ssh_hosts.submit_host_dir / uuid.uuid4().hex[:8]
    cli = make_cli(base)
    profile = ssh_hosts.own_disks_profile.read_text().replace(
        "\npython: ", f"\npython: '{sys.executable}'\n# was: ")
    (cli.cwd / "clusters").mkdir(parents=True, exist_ok=True)
    (cli.cwd / "clusters" / "own.yaml").write_text(profile)
    try:
        yield cli, copy_demo(base)
        ssh_hosts.assert_nothing_left(cli.home)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def on_host(ssh_hosts, i: int, job_id: str, path: str) -> str:  # type: ignore[no-untyped-def]
    """A file of the job's run folder on host ``i``'s own disk, read over ssh."""
    folder = f"{ssh_hosts.dir}/host-disk/fsdp-orch/runs/{job_id}"
    return ssh_hosts.ssh(i, "cat", f"{folder}/{path}").stdout


def submit_wait(cli: Cli, demo: Path, *extra: str) -> dict:
    proc = cli.run("submit", "--cluster", "own", "--wait", "--json", str(demo), *TWO_HOSTS, *extra,
                   timeout=400)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def test_the_hosts_cannot_see_the_submitting_side(ssh_hosts, apart):
    cli, demo = apart
    for i in (0, 1):
        seen = ssh_hosts.ssh(i, "ls", "-A", str(ssh_hosts.submit_host_dir)).stdout
        assert seen == "", f"host {i} sees {seen!r}"
        assert ssh_hosts.ssh(i, "test", "-e", str(demo), check=False).returncode == 1


def test_the_demo_runs_from_copies_on_each_hosts_own_disk(ssh_hosts, apart):
    cli, demo = apart
    status = submit_wait(cli, demo, "--set", demo_args(20))
    assert status["state"] == "SUCCEEDED", status
    job_id = status["id"]
    assert status["failures"] == [] and status["progress"]["step"] == 20
    # rank 0 wrote the result on host 1's disk; the other host has its own copy of the job
    result = json.loads(on_host(ssh_hosts, 0, job_id, "result.json"))
    assert result["world_size"] == 2 and result["final_step"] == 20, result
    for i in (0, 1):
        assert "train.py" in ssh_hosts.ssh(i, "ls", f"{ssh_hosts.dir}/host-disk/fsdp-orch/runs/"
                                                    f"{job_id}/code").stdout
        script = on_host(ssh_hosts, i, job_id, f"attempt-0/node-{i}.sh")
        assert f"NODE_RANK={i}" in script
    assert ssh_hosts.ssh(1, "test", "-e",
                         f"{ssh_hosts.dir}/host-disk/fsdp-orch/runs/{job_id}/result.json",
                         check=False).returncode == 1, "host 2 sees host 1's disk"
    # what the hosts reported came back: the console logs, per node, and the heartbeats
    run_dir = Path(status["run_dir"])
    assert run_dir.is_relative_to(ssh_hosts.submit_host_dir)
    logs = cli.run("logs", job_id, check=True).stdout
    assert "[node 0]" in logs and "[node 1]" in logs, logs[-2000:]
    for i in (0, 1):
        assert (run_dir / "attempt-0" / f"console-node-{i}.log").read_text() == \
            on_host(ssh_hosts, i, job_id, f"attempt-0/console-node-{i}.log")
    # the heartbeats stayed on each host (node-local tmp) and came back over the report streams only
    assert not (run_dir / "heartbeats").exists()
    for i in (0, 1):
        host_beat = ssh_hosts.ssh(i, "cat",
                                  f"{node_beat_dir(job_id, 0, i, uid=0)}/rank-{i}.json").stdout
        assert json.loads(host_beat)["state"] == "done", host_beat
        assert ssh_hosts.ssh(i, "test", "-e",
                             f"{ssh_hosts.dir}/host-disk/fsdp-orch/runs/{job_id}/heartbeats",
                             check=False).returncode == 1, (f"host {i} wrote heartbeats into "
                                                            "the run folder")


def test_a_hang_on_own_disks_restarts_to_the_exact_loss_and_a_taken_node_folder_is_told_and_reused(
        ssh_hosts, apart, uninterrupted, taken_on_host_2, other_account):  # noqa: F811
    """A hang on host 2, with own disks, restarts from the checkpoint copied between the hosts to
    the exact loss; and host 2's node-local folder was made first by another account
    (taken_node_folder's fixture and checks, whose own job was this same hang and
    restart): told in both attempts, one private folder serves both."""
    cli, demo = apart
    with private_folders_removed():
        hung = submit_wait(cli, demo, "--set", demo_args(30), "--set",
                           "env.FSDP_ORCH_FAULT=hang:step=12:rank=1")
        assert hung["state"] == "SUCCEEDED", why(hung)
        check_the_taken_folder(hung, other_account, taken_on_host_2)
    [failure] = hung["failures"]
    assert failure["category"] == "hang" and failure["action"] == "restart", failure
    assert "rank 1" in failure["evidence"]
    supervisor_log = (Path(hung["run_dir"]) / "supervisor.log").read_text()
    assert "between the hosts, so that each has all of it" in supervisor_log, supervisor_log[-3000:]
    result = json.loads(on_host(ssh_hosts, 0, hung["id"], "result.json"))
    reference = uninterrupted(30)  # 2 ranks that never stopped (the conftest's)
    assert result["resumed_from"] == 10, result
    assert result["final_loss"] == reference["final_loss"]
    assert result["param_sha256"] == reference["param_sha256"]


def test_each_rank_runs_inside_its_host_and_cancel_stops_them_all(ssh_hosts, apart):
    cli, demo = apart
    job_id = cli.run("submit", "--cluster", "own", str(demo), *TWO_HOSTS, "--set",
                     demo_args(*UNTIL_STOPPED), check=True).stdout.strip()
    cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 3, timeout=180,
                   what="three steps")
    inside = [ssh_hosts.ranks_inside(i, job_id) for i in (0, 1)]
    assert sorted(map(len, inside)) == [1, 1] and inside[0] != inside[1], inside
    assert "cancelled" in cli.run("cancel", job_id, check=True).stdout
    assert cli.status(job_id)["state"] == "CANCELLED"
    for i in (0, 1):
        assert ssh_hosts.job_processes(i, job_id) == [], f"host {i} still runs the job"


def test_a_host_whose_link_goes_down_is_lost_and_named(ssh_hosts, apart):
    """Host 2's link to the bridge is taken down mid-run: its report stream falls silent, a new
    connection times out, and the job (which needs both hosts) fails naming it. Under the default
    (adaptive, 2 s floor) hang window: host 1's ranks, waiting for host 2's, are not judged hung
    while host 2 is silent (no signal is not a hang)."""
    cli, demo = apart
    profile = cli.cwd / "clusters" / "own.yaml"
    third = f"  - {{address: {ssh_hosts.addresses[2]},"
    profile.write_text("".join(line for line in profile.read_text().splitlines(True)
                               if not line.startswith(third)))
    job_id = cli.run("submit", "--cluster", "own", str(demo), *TWO_HOSTS, "--set",
                     "restart.max_restarts=1", "--set", demo_args(*UNTIL_STOPPED),
                                               check=True).stdout.strip()
    cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 3, timeout=180,
                   what="three steps")
    lost = ssh_hosts.addresses[1]
    link = ["ip", "link", "set", "fo-v2"]
    subprocess.run([*link, "down"], check=True)
    try:
        down_at = time.monotonic()
        final = cli.wait_until(job_id, lambda s: s["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"),
                               timeout=240, what="the end")
        detected = (datetime.fromisoformat(
            final["failures"][0]["detected_at"].replace("Z", "+00:00")).timestamp()
                    - (time.time() - (time.monotonic() - down_at)))
    finally:
        subprocess.run([*link, "up"], check=True)
    assert final["state"] == "FAILED", final
    assert final["failures"][0]["category"] == "preemption_or_node_lost", final["failures"]
    assert (f"{lost}:22" in final["failures"][0]["evidence"]
            and f"{lost}:22" in final["reason"]), final
    assert detected < 30, f"the lost host was noticed {detected:.0f}s after its link went down"
    silences = notices(cli, job_id, "node_silent")
    assert silences and "node 1 for" in silences[0]["message"], silences
    assert [f["category"] for f in final["failures"]] == [
        "preemption_or_node_lost"], (final["failures"])
    left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
            for pid in ssh_hosts.job_processes(0, job_id)}
    assert left == {}, (left, (Path(final["run_dir"]) / "supervisor.log").read_text()[-3000:])
    # the ranks cut off on host 2 end once their peers are found gone (the link is back); the
    # keeper prepared there for a next attempt, which nothing could stop, ends on its own
    # (standby.ranks.UNCLAIMED_S after its launcher)
    deadline = time.monotonic() + 90
    while ssh_hosts.ranks_inside(1, job_id) and time.monotonic() < deadline:
        time.sleep(1)
    assert ssh_hosts.ranks_inside(1, job_id) == set(), "the ranks cut off on host 2 still run"


def test_a_checkpoint_planted_on_a_hosts_own_disk_is_refused_there_and_never_loaded(
        ssh_hosts, apart):
    """The other account's attack of issue 42 where only the host sees it: on host 0's own disk, a
    checkpoint folder of that account's (mode 0777) holds a complete-looking DCP checkpoint whose
    ``.metadata`` pickle runs ``id > MARKER`` when loaded. submit cannot see that disk; the host's
    launch script checks the folder before anything starts, and the attempt ends
    node_setup_error (not retried), naming the folder, its owner and mode."""
    from other_accounts import PLANT_CHECKPOINT
    from secret_checks import OTHER, other_account

    cli, demo = apart
    uid, gid = other_account()
    disk = f"{ssh_hosts.dir}/host-disk"
    planted, marker = f"{disk}/planted-{uuid.uuid4().hex[:6]}", f"{disk}/ran-as-the-victim"
    ssh_hosts.ssh(0, "python3", "-c", PLANT_CHECKPOINT, planted, marker)
    ssh_hosts.ssh(0, "chown", "-R", f"{uid}:{gid}", planted)
    ssh_hosts.ssh(0, "chmod", "777", planted)
    status = submit_wait(cli, demo, "--set", demo_args(10), "--set", f"checkpoint.dir={planted}")
    assert status["state"] == "FAILED", status
    [failure] = status["failures"]
    assert failure["category"] == "node_setup_error" and failure["action"] != "restart", failure
    assert f"refused checkpoint folder {planted}" in failure["evidence"], failure
    assert f"owned by uid {uid} ({OTHER}) (mode 0777)" in failure["evidence"], failure
    assert ssh_hosts.ssh(0, "test", "-e", marker, check=False).returncode == 1, (
        "the planted checkpoint was loaded: "
        + ssh_hosts.ssh(0, "cat", marker, check=False).stdout)
    events = cli.run("events", status["id"], "--json").stdout
    assert "step-00000400" not in events, "the planted checkpoint was taken for the job's"


def test_a_remote_workdir_another_account_made_first_is_refused_at_submit_and_runs_nothing(
        ssh_hosts, apart):
    """The audit's attack on hosts with their own disks: ``remote_workdir`` in a shared (1777)
    scratch on the hosts, made first by the other account, which then swapped the node scripts in
    it; they ran as the user on both hosts. Now submit checks the run folder on each host and
    refuses, naming the host, the folder's owner and the fix; nothing runs."""
    import tempfile

    from other_accounts import as_other
    from secret_checks import OTHER, other_account

    cli, demo = apart
    uid, gid = other_account()
    # a scratch both hosts see (their /tmp is this machine's), every account's, sticky
    scratch = tempfile.mkdtemp(prefix="fsdp-orch-ssh-scratch-", dir="/tmp")
    Path(scratch).chmod(0o1777)
    as_other((uid, gid), f"mkdir -m 755 {scratch}/fsdp-orch")
    profile = cli.cwd / "clusters" / "own.yaml"
    text = profile.read_text()
    start = text.index("remote_workdir:")
    end = text.index("\n", start)
    profile.write_text(f"{text[:start]}remote_workdir: {scratch}/fsdp-orch{text[end:]}")

    # checkpoints on the hosts' own disks, apart: only the run folder is in the scratch
    checkpoints = f"{ssh_hosts.dir}/host-disk/ckpt-{uuid.uuid4().hex[:6]}"
    proc = cli.run("submit", "--cluster", "own", str(demo), *TWO_HOSTS, "--set", demo_args(10),
                   "--set", f"checkpoint.dir={checkpoints}", timeout=200)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    [line] = proc.stderr.strip().splitlines()
    assert "remote_workdir: refused run folder" in line and f"{scratch}/fsdp-orch" in line, line
    assert f"owned by uid {uid} ({OTHER})" in line and "a folder of yours" in line, line
    try:
        assert list(Path(scratch, "fsdp-orch").iterdir()) == [], (
            "something was put in the other account's folder")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
