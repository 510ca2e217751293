"""A straggler on the real SLURM test cluster (issue 45): the demo on 2 of the 3 nodes with one
spare (``spare_nodes: 1``), 1 CPU rank a node, gloo. Once it trains, rank 1 (on node 2) runs at
half rank 0's speed (cpu cgroups, tests/cpu_caps.py): the supervisor names it from the ranks'
arrivals relayed by the node agents, within a minute, by its node's SLURM name; under
``watch.stragglers: replace`` the attempt ends at the next complete checkpoint and the next one, a
new step of the same SLURM job, runs on the spare, where no straggler is named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cpu_caps import (
    COMPUTE_BOUND,
    CPU_CGROUP,
    half_speed,
    ranks_by_node,
    remove,
    until_straggler_named,
    until_training,
)
from test_slurm_backend import slurm_id
from test_slurm_spares import events_of, expand, step_nodes

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.root, pytest.mark.straggler]

DETECTED_WITHIN_S = 60.0
REPLACE = ["--set", "nodes=2", "--set", "spare_nodes=1", "--set", "procs_per_node=1",
           "--set", "checkpoint.interval=25", "--set", "restart.backoff.initial=1s",
           "--set", "restart.backoff.jitter=0", "--set", "watch.startup_timeout=120s",
           "--set", "watch.stragglers=replace"]


def slurm_name(pid: int) -> str:
    """The SLURM name of the node process ``pid`` runs on (its SLURMD_NODENAME)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"SLURMD_NODENAME="))


def test_a_straggler_under_replace_is_named_then_swapped_for_the_spare_at_a_checkpoint(
        slurm_cluster, cli, demo) -> None:
    assert os.geteuid() == 0 and (CPU_CGROUP / "cgroup.procs").is_file(), "needs root, cgroup v1"
    job_id = cli.run("submit", "--cluster", "slurm", str(demo), *REPLACE,
                     "--set", COMPUTE_BOUND, check=True).stdout.strip()
    group = None
    try:
        until_training(cli, job_id)
        nodes = ranks_by_node(job_id)
        assert sorted(nodes) == [0, 1], nodes
        # the rank on node 1 is slowed: node 0 runs the supervisor (and the rendezvous), which a
        # spare cannot replace within the allocation
        (_, peer), (slowed_rank, slowed_pid) = nodes[0], nodes[1]
        slowed_node = slurm_name(slowed_pid)
        group = half_speed(peer, slowed_pid, f"fsdp-orch-test-{job_id}")
        event, took = until_straggler_named(cli, job_id)
        assert event["message"].startswith(
            f"node 1 ({slowed_node}), rank {slowed_rank}: the others wait "), event
        assert f"its node {slowed_node} is left out at the next checkpoint" in event["message"]
        assert took <= DETECTED_WITHIN_S, (took, event)
        moved = cli.wait_until(job_id, lambda s: s["attempts"] >= 2 and (
            (s.get("progress") or {}).get("step", 0) >= (s.get("last_checkpoint_step") or 0) + 10)
            or s["state"] not in ("PENDING", "RUNNING", "RESTARTING"), timeout=240,
            what="the next attempt training on the spare")
        assert moved["state"] == "RUNNING", moved
        [failure] = moved["failures"]
        assert (failure["category"], failure["action"]) == ("straggler_replaced", "restart")
        assert "replaced at the checkpoint of step" in failure["evidence"], failure
        assert moved["left_out"] == [slowed_node], moved
        steps = step_nodes(slurm_cluster, slurm_id(cli, job_id))
        first, second = expand(steps["fsdp-orch-attempt-0"]), expand(steps["fsdp-orch-attempt-1"])
        assert slowed_node in first and slowed_node not in second and len(second) == 2, steps
        assert [e["kind"] for e in events_of(cli, job_id)].count("scheduled") == 1
        assert not [e for e in moved["events"] if e["kind"] == "straggler" and e["attempt"] == 1]
    finally:
        cli.run("cancel", job_id)
        if group is not None:
            remove(group)
