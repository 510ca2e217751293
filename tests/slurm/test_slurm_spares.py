"""Spare nodes on the real SLURM test cluster (three nodes, issue 45 item 2): ``spare_nodes: 1``
allocates one node more than the job runs on. A node whose agent goes silent past the node timeout
is lost: it is left out and the next attempt runs in the same SLURM job, as a new job step on an
explicit node list, with the spare in its place, resumed from the latest complete checkpoint, its
ranks started from the keeper the spare's keeper host kept ready (warm standby). When
no spare is left (here: the supervisor's own node was the one lost), the job is submitted again
with ``--exclude`` of the nodes left out, and resumes there.

Losing a node is killing its node agent (the test cluster's three nodes are slurmd daemons on this
one machine, so a node cannot be switched off; to the supervisor, a silent agent is a lost node,
whatever silenced it). CLI on a login node kept apart; 1 CPU rank a node, gloo."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
from cli_harness import demo_args, standby_starts
from test_slurm_backend import node_agent_of, result_of, slow_first_attempt, slurm_id

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

NODE_TIMEOUT_S = 10.0
WITH_A_SPARE = ["--set", "spare_nodes=1", "--set", "procs_per_node=1",
                "--set", "checkpoint.interval=5", "--set", "restart.backoff.initial=1s",
                "--set", "restart.backoff.jitter=0", "--set", "watch.heartbeat_timeout=10s",
                "--set", "watch.startup_timeout=120s",
                "--set", f"watch.node_timeout={NODE_TIMEOUT_S:g}s"]
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def events_of(cli, job_id: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return [json.loads(line)
            for line in cli.run("events", job_id, "--json", check=True).stdout.splitlines()]


def step_nodes(slurm_cluster, sid: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """{step name: the nodes it ran on, as sacct lists them} for the SLURM job ``sid``."""
    rows = slurm_cluster.sacct(sid, "JobID", "JobName", "NodeList")
    return {r["JobName"]: r["NodeList"] for r in rows if r["JobName"].startswith("fsdp-orch-att")}


def expand(nodelist: str) -> set[str]:
    """``node[1,3]`` or ``node[1-3]`` or ``node2``: the node names."""
    m = re.fullmatch(r"(\w+?)\[([\d,-]+)\]", nodelist)
    if not m:
        return {nodelist}
    names = set()
    for part in m.group(2).split(","):
        low, _, high = part.partition("-")
        names.update(f"{m.group(1)}{i}" for i in range(int(low), int(high or low) + 1))
    return names


def lose_node(cli, job_id: str, node_rank: int, after_step: int) -> str:  # type: ignore[no-untyped-def]
    """Once a checkpoint at ``after_step`` is complete, the agent of ``node_rank`` is killed;
    returns the SLURM name of its node, as the supervisor then names it. The jobs here train at
    0.3 s a step in attempt 0 (``slow_first_attempt``), still training when the node is named lost,
    and at full speed after it (the steps left took 15-20 s of sleep more)."""
    cli.wait_until(job_id, lambda s: (s.get("last_checkpoint_step") or 0) >= after_step,
                   timeout=300, what=f"a checkpoint at step {after_step}")
    pid = node_agent_of(job_id, node_rank)
    assert pid is not None, f"no node agent runs for node {node_rank}"
    node = next(part.split("=", 1)[1] for part in
                open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace").split("\0")
                if part.startswith("SLURMD_NODENAME="))
    os.kill(pid, signal.SIGKILL)
    return node


def test_a_lost_node_is_left_out_and_the_next_attempt_runs_on_the_spare_in_the_same_job(
        slurm_cluster, cli, demo) -> None:
    job_id = cli.run("submit", "--cluster", "slurm", str(demo), "--set", "nodes=2", *WITH_A_SPARE,
                     "--set", demo_args(60), *slow_first_attempt(0.3), check=True).stdout.strip()
    lost = lose_node(cli, job_id, 1, after_step=5)
    final = cli.wait_until(job_id, lambda s: s["state"] in TERMINAL, timeout=400, what="the end")
    assert final["state"] == "SUCCEEDED" and final["attempts"] == 2, final
    [failure] = final["failures"]
    assert (failure["category"], failure["action"]) == ("preemption_or_node_lost", "restart")
    assert failure["evidence"].startswith(f"node 1 (host {lost}) is lost"), failure["evidence"]
    # named, and not used again: the second attempt's job step ran on the other two nodes
    assert final["left_out"] == [lost], final
    [excluded] = [e for e in final["events"] if e["kind"] == "host_excluded"]
    assert lost in excluded["message"], excluded
    sid = slurm_id(cli, job_id)
    assert [e["kind"] for e in events_of(cli, job_id)].count("scheduled") == 1  # one SLURM job
    steps = step_nodes(slurm_cluster, sid)
    first, second = expand(steps["fsdp-orch-attempt-0"]), expand(steps["fsdp-orch-attempt-1"])
    assert lost in first and lost not in second and len(second) == 2, steps
    assert second - first, steps  # the spare
    assert result_of(cli, job_id)["resumed_from"] >= 5
    text = cli.run("status", job_id, check=True).stdout
    assert f"left out: {lost}" in text, text
    # warm on the spare too: each node's ranks came from the keeper its keeper host kept ready
    started = standby_starts(Path(final["run_dir"]) / "attempt-1")
    assert len(started) == 2 and all("keeper host" in how for how in started), started


def test_with_no_spare_left_the_job_is_submitted_again_without_the_lost_node(
        slurm_cluster, cli, demo) -> None:
    """One node, one spare: the node lost is the supervisor's own (the rendezvous runs there), so no
    spare can take its place in this allocation; a new SLURM job excludes it and resumes."""
    job_id = cli.run("submit", "--cluster", "slurm", str(demo), "--set", "nodes=1", *WITH_A_SPARE,
                     "--set", demo_args(40), *slow_first_attempt(0.3, ranks=1),
                     check=True).stdout.strip()
    first_sid = slurm_id(cli, job_id)
    lost = lose_node(cli, job_id, 0, after_step=5)
    final = cli.wait_until(job_id, lambda s: s["state"] in TERMINAL, timeout=500, what="the end")
    assert final["state"] == "SUCCEEDED", final
    [failure] = final["failures"]
    assert (failure["category"], failure["action"]) == ("preemption_or_node_lost", "requeue")
    assert final["left_out"] == [lost], final
    sids = [e["backend_ref"].split(":")[1] for e in events_of(cli, job_id)
            if e["kind"] == "scheduled"]
    assert len(sids) == 2 and sids[0] == first_sid, sids
    [requeued] = [e for e in final["events"] if e["kind"] == "requeued_without"]
    assert f"slurm:{sids[1]}" in requeued["message"] and lost in requeued["message"], requeued
    rows = slurm_cluster.sacct(sids[1], "JobID", "NodeList", "State")
    ran_on = expand(next(r["NodeList"] for r in rows if r["JobID"] == sids[1]))
    assert lost not in ran_on, rows
    assert result_of(cli, job_id)["resumed_from"] >= 5

