"""A straggler on real sshd hosts (issue 45): the demo on 2 hosts x 1 rank (gloo over the namespace
network); once it trains, the rank on the second host runs at half the first's speed (cpu cgroups,
tests/cpu_caps.py: the hosts' processes run on this machine). The supervisor names it from the
ranks' arrivals in the hosts' reports, within a minute, with its node."""

from __future__ import annotations

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


def test_a_rank_at_half_speed_on_the_second_host_is_named_within_a_minute(on_hosts) -> None:  # noqa: F811
    cli, demo = on_hosts
    job_id = cli.run("submit", "--cluster", "ssh", str(demo), *TWO_HOSTS,
                     "--set", COMPUTE_BOUND, check=True).stdout.split()[-1]
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
        assert took <= DETECTED_WITHIN_S, (took, event)
    finally:
        cli.run("cancel", job_id)
        if group is not None:
            remove(group)
