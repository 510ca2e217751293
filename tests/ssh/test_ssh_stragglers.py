"""A straggler on real sshd hosts (issue 45): the demo on 2 hosts x 1 rank (gloo over the namespace
network); once it trains, the rank on the second host runs at half the first's speed (cpu cgroups,
tests/cpu_caps.py: the hosts' processes run on this machine). The supervisor names it from the
ranks' arrivals in the hosts' reports, within a minute, with its node, and under
``watch.stragglers: replace`` swaps its host for the profile's third at the next checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpu_caps import (
    COMPUTE_BOUND,
    half_speed,
    ranks_by_node,
    remove,
    until_straggler_named,
    until_training,
)
from test_ssh_backend import TWO_HOSTS, on_hosts  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.straggler]

DETECTED_WITHIN_S = 60.0


def test_a_straggler_on_the_second_host_is_named_then_replaced_by_the_third_at_a_checkpoint(
        ssh_hosts, on_hosts) -> None:  # noqa: F811
    """The profile lists the 3 hosts, the job runs on 2: under ``watch.stragglers: replace`` the
    straggler's host is left out at the next complete checkpoint, and the third host takes its
    place, as for a lost host."""
    cli, demo = on_hosts
    slowed_host, spare = ssh_hosts.addresses[1], ssh_hosts.addresses[2]
    job_id = cli.run("submit", "--cluster", "ssh", str(demo), *TWO_HOSTS,
                     "--set", COMPUTE_BOUND, "--set", "watch.stragglers=replace",
                     check=True).stdout.split()[-1]
    group = None
    try:
        until_training(cli, job_id)
        nodes = ranks_by_node(job_id)
        assert sorted(nodes) == [0, 1], nodes
        (_, peer), (slowed_rank, slowed_pid) = nodes[0], nodes[1]
        group = half_speed(peer, slowed_pid, f"fsdp-orch-test-{job_id}")
        event, took = until_straggler_named(cli, job_id)
        assert event["message"].startswith("node 1 ("), event
        assert f"rank {slowed_rank}: the others wait " in event["message"], event
        assert f"its node {slowed_host}:22 is left out at the next checkpoint" in event["message"]
        assert took <= DETECTED_WITHIN_S, (took, event)
        replaced = cli.wait_until(job_id, lambda s: s["failures"] or s["state"] not in (
            "PENDING", "RUNNING", "RESTARTING"), timeout=240, what="the replacement")
        [failure] = replaced["failures"]
        at_step = int(failure["evidence"].split("checkpoint of step ")[1].split(" ")[0])
        moved = cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0)
                               >= at_step + 10 or s["state"] not in ("RUNNING", "RESTARTING"),
                               timeout=240, what="the next attempt training on the third host")
        assert moved["state"] == "RUNNING", moved
        assert moved["failures"] == [failure], moved["failures"]
        assert (failure["category"], failure["action"]) == ("straggler_replaced", "restart")
        hosts_txt = (Path(moved["run_dir"]) / "attempt-1" / "hosts.txt").read_text()
        assert f"node 1: root@{spare}:22:" in hosts_txt and slowed_host not in hosts_txt, hosts_txt
        assert not [e for e in moved["events"] if e["kind"] == "straggler" and e["attempt"] == 1]
    finally:
        cli.run("cancel", job_id)
        if group is not None:
            remove(group)
