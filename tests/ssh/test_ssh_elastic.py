"""Hosts lost mid-run on the real sshd hosts (tests/ssh/hosts.sh): host 2's sshd and every process
in it are killed (a crashed machine) after a checkpoint. An elastic job (``nodes: 1-2``) finishes on
host 1 alone, from the last complete checkpoint, with the data order it started with: to the loss of
a run that never lost a host, up to the order of floating-point sums. A job of fixed size
(``nodes: 2``) whose cluster lists a third host goes on there instead, bit for bit. A supervisor
killed while it backs off is re-attached and still leaves the lost host out (from the events)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import Cli, demo_args
from test_ssh_backend import write_profile

from fsdp_orch.observe.proctree import pid_alive
from fsdp_orch.record.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.root]

STEPS = 30
# The demo at test size (the conftest's uninterrupted run is the same), slowed down so that host 2
# can be killed between checkpoints: after the checkpoint of step 10, the 20 steps left take at
# least 9 s (as the 30 left of 40 steps at 0.3 s did): the job still runs when it is killed.
ONE_RANK_PER_HOST = ["--set", "procs_per_node=1", "--set", "checkpoint.interval=5",
                     "--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0",
                     "--set", "watch.heartbeat_timeout=60s", "--set", "watch.startup_timeout=120s",
                     "--set", demo_args(STEPS, "--sleep-per-step", "0.45")]
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


@pytest.fixture
def straight(uninterrupted: Callable[[int], dict]) -> dict:
    """The demo's result for the same steps by 2 ranks that were never interrupted (on this machine:
    the same arithmetic as one rank on each of two hosts): the conftest's, which the hang tests of
    test_ssh_backend and test_ssh_own_disks share (one job a session, not one more here)."""
    return uninterrupted(STEPS)


def lose_host_2_after_a_checkpoint(ssh_hosts, cli: Cli,  # type: ignore[no-untyped-def]
                                   demo: Path, nodes: str, *extra: str,
                                   then: Callable[[str], None] | None = None) -> tuple[dict, int]:
    """Submit, kill host 2 once step 10 is checkpointed, ``then(job_id)``, wait for the end (then
    start host 2 again). Returns the final status and the checkpoint step committed before the
    kill."""
    job_id = cli.run("submit", "--cluster", "ssh", str(demo), "--set", f"nodes={nodes}",
                     *ONE_RANK_PER_HOST, *extra, check=True).stdout.strip()
    try:
        running = cli.wait_until(job_id, lambda s: (s.get("last_checkpoint_step") or 0) >= 10,
                                 timeout=240, what="a checkpoint of step 10")
        assert running["state"] == "RUNNING" and running["attempts"] == 1, running
        assert ssh_hosts.job_processes(1, job_id), "host 2 does not run the job"
        try:
            for pid in ssh_hosts.pids(1):  # sshd and the job's processes there: the host is gone
                subprocess.run(["kill", "-9", str(pid)], check=False)
            if then is not None:
                then(job_id)
            final = cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=300,
                                   what="the end")
        finally:
            ssh_hosts.restart_sshd(1)
    finally:
        if cli.status(job_id)["state"] not in ENDED:
            cli.run("cancel", job_id)
    for i in range(len(ssh_hosts.addresses)):
        assert ssh_hosts.job_processes(i, job_id) == [], f"host {i + 1} still runs the job"
    return final, running["last_checkpoint_step"]


def check_one_restart_after_losing(final: dict, lost: str) -> dict:
    """One failure, the lost host named and excluded; the job's events by kind."""
    assert final["state"] == "SUCCEEDED", final
    [failure] = final["failures"]
    assert (failure["category"] == "preemption_or_node_lost"
            and failure["action"] == "restart"), failure
    assert f"root@{lost}:22 (node 1) stopped answering" in failure["evidence"], failure
    events = {e["kind"]: e for e in final["events"]}
    assert events["host_excluded"]["message"].startswith(
        f"host {lost}:22 was lost in attempt 0"), events
    assert events["fewer_hosts"]["attempt"] == 1, events
    assert final["attempts"] == 2 and final["progress"]["step"] == STEPS, final
    return events


def test_a_host_lost_mid_run_with_nodes_1_2_finishes_on_the_other_from_the_last_checkpoint(
        ssh_hosts, cli, demo, straight):
    write_profile(cli, ssh_hosts, ssh_hosts.addresses[:2])
    lost, left = ssh_hosts.addresses[1], ssh_hosts.addresses[0]
    final, checkpoint_before = lose_host_2_after_a_checkpoint(ssh_hosts, cli, demo, "1-2")
    events = check_one_restart_after_losing(final, lost)
    assert events["fewer_hosts"]["message"].startswith(
        f"attempt 1 runs without {lost}:22: on 1 node(s) ({left}:22; nodes: 1-2), "
        "world size 1 of 2"), events

    run_dir = Path(final["run_dir"])
    second = run_dir / "attempt-1"
    assert sorted(p.name for p in second.glob("node-*.sh")) == ["node-0.sh"]
    assert lost not in (second / "hosts.txt").read_text()
    assert "--nnodes 1" in (second / "node-0.sh").read_text()
    result = json.loads((run_dir / "result.json").read_text())
    # Resumed from the last checkpoint committed by both hosts: at least the one seen before the
    # kill.
    assert result["resumed_from"] >= checkpoint_before > 0, result
    assert (result["world_size"], result["saved_world_size"], result["final_step"]) == (
        1, 2, STEPS), result
    assert result["data_ranks"] == 2, result  # host 1 took host 2's share of each step's data too
    console = (second / "console-node-0.log").read_text()
    assert (f"resumed from {demo.parent / 'checkpoints' / 'demo'}/step-{result['resumed_from']:08d}"
            in console)
    assert "saved by 2 ranks and is restored on 1" in console
    assert result["final_loss"] == pytest.approx(straight["final_loss"],
                                                 rel=1e-4), ((result, straight))


def test_a_spare_host_takes_the_place_of_a_lost_one(ssh_hosts, cli, demo, straight):
    """nodes: 2 on a cluster of three hosts: node 1 moves from host 2 to host 3."""
    write_profile(cli, ssh_hosts, ssh_hosts.addresses[:3])
    lost, spare = ssh_hosts.addresses[1], ssh_hosts.addresses[2]
    final, checkpoint_before = lose_host_2_after_a_checkpoint(ssh_hosts, cli, demo, "2")
    events = check_one_restart_after_losing(final, lost)
    assert events["fewer_hosts"]["message"].startswith(
        f"attempt 1 runs without {lost}:22: on 2 node(s) ({ssh_hosts.addresses[0]}:22, "
        f"{spare}:22; nodes: 2), world size 2 of 2"), events
    hosts_txt = (Path(final["run_dir"]) / "attempt-1" / "hosts.txt").read_text()
    assert f"node 1: root@{spare}:22:" in hosts_txt and lost not in hosts_txt, hosts_txt
    result = json.loads((Path(final["run_dir"]) / "result.json").read_text())
    assert result["resumed_from"] >= checkpoint_before > 0 and result["world_size"] == 2, result
    assert (result["final_loss"], result["param_sha256"]) == (
        straight["final_loss"], straight["param_sha256"])


def test_a_reattached_supervisor_still_leaves_the_lost_host_out(ssh_hosts, cli, demo):
    """The supervisor is killed while it backs off before the restart; `status` re-attaches a new
    one, which starts the next attempt on host 1 alone: it knows host 2 is lost only from the
    events."""
    write_profile(cli, ssh_hosts, ssh_hosts.addresses[:2])
    lost, left = ssh_hosts.addresses[1], ssh_hosts.addresses[0]
    store = Store(cli.home / "jobs.db")
    killed: list[int] = []

    def kill_the_supervisor_while_it_backs_off(job_id: str) -> None:
        cli.wait_until(job_id, lambda s: s["state"] == "RESTARTING", timeout=120,
                       what="the backoff")
        pid = store.job(job_id).supervisor_pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(pid)
        killed.append(pid)
        cli.status(job_id)  # notices the dead supervisor and re-attaches a new one

    final, _ = lose_host_2_after_a_checkpoint(ssh_hosts, cli, demo, "1-2", "--set",
                                              "restart.backoff.initial=30s",
                                              then=kill_the_supervisor_while_it_backs_off)
    events = check_one_restart_after_losing(final, lost)
    assert events["fewer_hosts"]["message"].startswith(f"attempt 1 runs without {lost}:22: on 1 "
                                                       f"node(s) ({left}:22;")
    assert killed and store.job(final["id"]).supervisor_pid != killed[0]
    log = (Path(final["run_dir"]) / "supervisor.log").read_text()
    assert f"resuming job {final['id']} at attempt 1" in log, log
    result = json.loads((Path(final["run_dir"]) / "result.json").read_text())
    assert ((result["world_size"], result["final_step"]) == (1, STEPS)
            and result["resumed_from"] > 0), result
