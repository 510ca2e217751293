"""`fsdp-orch submit --cluster ssh` on real sshd hosts (tests/ssh/hosts.sh: network namespaces on a
bridge, one sshd each, one shared filesystem): the demo on 2 hosts x 1 rank over the namespace
network (gloo), a hang on the second host, cancel, an unreachable host and a changed host key."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_harness import (
    UNTIL_STOPPED,
    Cli,
    check_goodput,
    copy_demo,
    culprit_leads,
    demo_args,
    hf_trainer_hang_on_two_nodes,
    make_cli,
    standby_starts,
)
from logs_on_node import node_logs_not_copied

pytestmark = [pytest.mark.slow, pytest.mark.root]

TWO_HOSTS = ["--set", "nodes=2", "--set", "procs_per_node=1", "--set", "checkpoint.interval=5",
             "--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0",
             "--set", "watch.heartbeat_timeout=10s", "--set", "watch.startup_timeout=120s"]


def write_profile(cli: Cli, hosts,  # type: ignore[no-untyped-def]
                  addresses: tuple[str, ...] | None = None,
                  known_hosts: Path | None = None, name: str = "ssh") -> None:
    """The cluster profile for the namespace hosts, with this interpreter (fsdp-orch and torch)."""
    lines = ["kind: ssh", "device: cpu", "hosts:"]
    for address in addresses or hosts.addresses:
        lines.append(
            f"  - {{address: {address}, port: 22, user: root, identity_file: {hosts.key}}}")
    lines += [f"python: {sys.executable}", f"known_hosts: {known_hosts or hosts.known_hosts}",
              "host_key_policy: strict", "shared_filesystem: true", "connect_timeout: 3",
              'env: {GLOO_SOCKET_IFNAME: eth0, OMP_NUM_THREADS: "1"}']
    (cli.cwd / "clusters").mkdir(parents=True, exist_ok=True)
    (cli.cwd / "clusters" / f"{name}.yaml").write_text("\n".join(lines) + "\n")


@pytest.fixture
def on_hosts(ssh_hosts, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A CLI whose `ssh` profile names the namespace hosts, and a private copy of the demo; after
    the test, no process of any of its jobs is left on any host."""
    cli = make_cli(tmp_path)
    write_profile(cli, ssh_hosts)
    yield cli, copy_demo(tmp_path)
    runs = cli.home / "runs"
    for job_id in (p.name for p in runs.iterdir()) if runs.is_dir() else []:
        if cli.status(job_id)["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            # a test that failed half-way: what cancel leaves is checked below
            cli.run("cancel", job_id)
        left = {ns: ssh_hosts.job_processes(i, job_id) for i, ns in enumerate(ssh_hosts.namespaces)}
        assert not any(left.values()), f"job {job_id} left processes behind: {left}"


def submit_wait(cli: Cli, demo: Path, *extra: str, timeout: float = 400) -> dict:
    proc = cli.run("submit", "--cluster", "ssh", "--wait", "--json", str(demo), *TWO_HOSTS, *extra,
                   timeout=timeout)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def result_of(status: dict) -> dict:
    return json.loads((Path(status["run_dir"]) / "result.json").read_text())


def test_the_demo_runs_one_rank_inside_each_host(ssh_hosts, on_hosts):
    cli, demo = on_hosts
    job_id = cli.run("submit", "--cluster", "ssh", str(demo), *TWO_HOSTS,
                     "--set", demo_args(30, "--sleep-per-step", "0.3"),
                     check=True).stdout.strip()
    seen: dict[int, set[int]] = {0: set(), 1: set()}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not all(seen[h] for h in (0, 1)):
        for host in (0, 1):
            seen[host] |= ssh_hosts.ranks_inside(host, job_id)
        time.sleep(0.5)
    # one rank in each host's namespace (which rank is the c10d rendezvous' choice)
    assert sorted(map(len, seen.values())) == [1, 1] and seen[0] != seen[1], seen
    final = cli.wait_until(job_id, lambda s: s["state"] in ("SUCCEEDED", "FAILED"), timeout=300,
                           what="the end")
    assert final["state"] == "SUCCEEDED", final
    assert final["failures"] == [] and final["progress"]["step"] == 30
    assert result_of(final)["world_size"] == 2


def test_a_hang_on_the_second_host_stops_every_host_and_resumes_to_the_same_loss(
        ssh_hosts, on_hosts, uninterrupted):
    cli, demo = on_hosts
    hung = submit_wait(cli, demo, "--set", demo_args(30), "--set",
                       "env.FSDP_ORCH_FAULT=hang:step=12:rank=1",
                       "--set", "launch.prepare_standby_after=0s")  # the hang comes within 10 s
    assert hung["state"] == "SUCCEEDED", hung
    [failure] = hung["failures"]
    assert failure["category"] == "hang" and failure["action"] == "restart", failure
    assert culprit_leads(failure["evidence"], 1), failure["evidence"]
    goodput = check_goodput(cli, hung)
    assert goodput["seconds"]["detection"] > 0 and goodput["seconds"]["restart"] > 0, goodput
    result = result_of(hung)
    assert result["resumed_from"] >= 5
    # the same weights, bit for bit, as 2 ranks that never stopped (the conftest's uninterrupted)
    assert result["final_loss"] == uninterrupted(30)["final_loss"]
    assert result["param_sha256"] == uninterrupted(30)["param_sha256"]
    # warm: after the hang, each host's ranks came from the keeper its launcher of attempt 0
    # prepared there (torch imported), not a new torchrun
    started = standby_starts(Path(hung["run_dir"]) / "attempt-1")
    assert started == ["prepared by the attempt before"] * 2, started
    # each host kept its logs; the run folder has them whole: stopped (the stop command copied
    # them) and ended (its wrapper did, before the exit status)
    for attempt in ("attempt-0", "attempt-1"):
        assert node_logs_not_copied(Path(hung["run_dir"]) / attempt, hung["id"], (0, 1)) == []


def test_cancel_leaves_no_process_on_any_host(ssh_hosts, on_hosts):
    cli, demo = on_hosts
    job_id = cli.run("submit", "--cluster", "ssh", str(demo), *TWO_HOSTS,
                     "--set", demo_args(*UNTIL_STOPPED), check=True).stdout.strip()
    cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 3, timeout=180,
                   what="three steps")
    assert all(ssh_hosts.job_processes(i, job_id) for i in (0, 1))
    assert "cancelled" in cli.run("cancel", job_id, check=True).stdout
    assert cli.status(job_id)["state"] == "CANCELLED"
    for i in (0, 1):
        assert ssh_hosts.job_processes(i, job_id) == [], f"host {i} still runs the job"


def test_an_unreachable_host_fails_submit_within_the_connect_timeout_naming_it(ssh_hosts, on_hosts):
    cli, demo = on_hosts
    write_profile(cli, ssh_hosts, addresses=(ssh_hosts.addresses[0], "10.77.0.250"), name="gone")
    t0 = time.monotonic()
    proc = cli.run("submit", "--cluster", "gone", str(demo), *TWO_HOSTS, timeout=60)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1 and "10.77.0.250:22" in proc.stderr, proc.stderr
    assert "connect_timeout (3s)" in proc.stderr or "unreachable" in proc.stderr, proc.stderr
    # bounded by the connect timeout, not by TCP's own give-up (about 130 s to an address that never
    # answers): 19.4 s in a clean-clone CI at load 5 on 2 cores (the CLI, the other host)
    assert elapsed < 3 + 40, f"submit took {elapsed:.1f}s"
    assert "Traceback" not in proc.stderr


def test_a_changed_host_key_refuses_to_connect(ssh_hosts, on_hosts, tmp_path: Path):
    cli, demo = on_hosts
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    lines = ssh_hosts.known_hosts.read_text().splitlines()
    first = ssh_hosts.addresses[0]
    forged = [f"{first} {other.with_suffix('.pub').read_text().strip()}"
              if line.startswith(first + " ") else line
              for line in lines]
    (tmp_path / "known_hosts").write_text("\n".join(forged) + "\n")
    write_profile(cli, ssh_hosts, known_hosts=tmp_path / "known_hosts", name="forged")
    proc = cli.run("submit", "--cluster", "forged", str(demo), *TWO_HOSTS, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert f"host root@{first}:22: its key does not match" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unmodified_hf_trainer_spans_two_hosts_and_survives_a_hang(ssh_hosts, tmp_path):
    """examples/unchanged/hf_trainer (transformers' Trainer, a GPT-2 built from a config, never
    importing fsdp_orch) with one rank on each host; rank 1 hangs at step 25, after step 20's
    save (the step window follows 25 steps, the Trainer's own resume 10)."""
    cli = make_cli(tmp_path)
    write_profile(cli, ssh_hosts)
    status, job = hf_trainer_hang_on_two_nodes(cli, "ssh", tmp_path, max_steps=30, save_steps=10,
                                               hang_step=25)
    node0 = (Path(status["run_dir"]) / "attempt-1" / "node-0.sh").read_text()
    assert f"--resume_from_checkpoint {job.parent / 'out' / 'checkpoint-20'}" in node0
    for i in (0, 1):
        assert ssh_hosts.job_processes(i, status["id"]) == []


def test_a_host_lost_mid_run_is_node_lost_and_the_job_fails_naming_it(ssh_hosts, on_hosts):
    """Host 2's sshd and every process in it are killed mid-run (a crashed machine). The job needs
    both hosts (nodes: 2) and the cluster lists no other, so it fails at once (no restart could be
    placed), naming the lost host and what the job needs."""
    cli, demo = on_hosts
    # no spare host to take the lost one's place
    write_profile(cli, ssh_hosts, ssh_hosts.addresses[:2])
    job_id = cli.run("submit", "--cluster", "ssh", str(demo), *TWO_HOSTS, "--set",
                     "restart.max_restarts=1",
                     "--set", "watch.heartbeat_timeout=60s", "--set", demo_args(*UNTIL_STOPPED),
                     check=True).stdout.strip()
    cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 3, timeout=180,
                   what="three steps")
    lost = ssh_hosts.addresses[1]
    try:
        for pid in ssh_hosts.pids(1):  # sshd and the job's processes there: the host is gone
            subprocess.run(["kill", "-9", str(pid)], check=False)
        final = cli.wait_until(job_id, lambda s: s["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"),
                               timeout=180, what="the end")
    finally:
        ssh_hosts.restart_sshd(1)
    assert final["state"] == "FAILED", final
    [failure] = final["failures"]
    assert (failure["category"] == "preemption_or_node_lost"
            and failure["action"] == "give_up"), failure
    assert f"{lost}:22" in failure["evidence"], failure
    assert (f"cannot restart: cluster 'ssh' has 1 of its 2 hosts left ({lost}:22 lost); the "
            "job needs 2 (nodes: 2)") in final["reason"], final["reason"]
    assert [e["message"] for e in final["events"] if e["kind"] == "host_excluded"] == [
        f"host {lost}:22 was lost in attempt 0: the attempts after it are planned without it"]
    assert final["attempts"] == 1
    supervisor_log = (Path(final["run_dir"]) / "supervisor.log").read_text()
    assert f"host root@{lost}:22 (node 1) stopped answering" in supervisor_log
    assert ssh_hosts.job_processes(0, job_id) == []  # the host that was left is stopped too
