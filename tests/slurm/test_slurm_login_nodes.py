"""The index is only an index: two login nodes with private homes and one shared run root agree on
every job, and a database deleted mid-run is rebuilt from the event logs to the same status JSON.
Real SLURM test cluster, two nodes; each login node in its own mount namespace."""

from __future__ import annotations

import json

import pytest
from cli_harness import copy_demo, culprit_leads, demo_args, slow_in_attempt

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.root]

TWO_NODES = ["--set", "nodes=2", "--set", "procs_per_node=1", "--set", "checkpoint.interval=5",
             "--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0",
             "--set", "watch.heartbeat_timeout=10s", "--set", "watch.startup_timeout=120s"]
# What a status shows that cannot move while a job runs on (progress can, a step at a time).
SETTLED = ("id", "name", "cluster", "created_at", "run_dir", "failures", "attempts", "restarts")


def ended(status: dict) -> bool:
    return status["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")


def forget_the_index(node) -> None:  # type: ignore[no-untyped-def]
    gone = node.inside("sh", "-c",
                       f"rm -f {node.home}/jobs.db {node.home}/jobs.db-wal {node.home}/jobs.db-shm")
    assert gone.returncode == 0, gone.stderr
    # What is left is the rebuild's lock file (empty: record/heal.py), nothing with a status in it.
    assert set(node.inside("ls", "-A", str(node.home)).stdout.split()) <= {"jobs.db.lock"}


def test_two_login_nodes_agree_and_a_deleted_index_is_rebuilt_to_the_same_status(
        slurm_cluster, login_nodes, tmp_path):
    a, b = login_nodes(2)
    demo = copy_demo(tmp_path)
    # attempt 0 trains at full speed to its hang at step 12; attempt 1 at 0.5 s a step (an
    # injected slow fault on both ranks, attempt 1 only), still running through the checks below
    # (``--sleep-per-step`` slept in attempt 0 too, 6 s that tested nothing)
    faults = ["hang:step=12:rank=1", *slow_in_attempt(1, 0.5)]
    job_id = a.cli.run("submit", "--cluster", "slurm", str(demo), *TWO_NODES,
                       "--set", demo_args(40), "--set", "env.FSDP_ORCH_FAULT=" + ";".join(faults),
                       check=True).stdout.strip()
    # past step 12, where attempt 0 hung: a step the second attempt took (at 12 itself, status
    # could still show attempt 0's last step while attempt 1 had resumed below it)
    mid = a.cli.wait_until(job_id, lambda s: bool(s["failures"]) and s["state"] == "RUNNING"
                           and (s.get("progress") or {}).get("step", 0) >= 13, timeout=400,
                           what="running again after the hang")
    # The second login node has never seen this job: it finds it in the shared run root.
    seen_by_b = b.cli.status(job_id)
    assert {k: seen_by_b[k] for k in SETTLED} == {k: mid[k] for k in SETTLED}

    forget_the_index(a)
    rebuilt = a.cli.status(job_id)
    assert {k: rebuilt[k] for k in SETTLED} == {k: mid[k] for k in SETTLED}
    assert rebuilt["state"] == "RUNNING" and rebuilt["progress"]["step"] >= mid["progress"]["step"]

    final = a.cli.wait_until(job_id, ended, timeout=400, what="the end")
    assert final["state"] == "SUCCEEDED" and [f["category"] for f in final["failures"]] == ["hang"]
    assert culprit_leads(final["failures"][0]["evidence"], 1), final["failures"][0]["evidence"]
    assert b.cli.status(job_id) == final
    forget_the_index(a)
    # every field: the README lists none that events cannot know
    assert a.cli.status(job_id) == final
    listed_a = json.loads(a.cli.run("status", "--json", check=True).stdout)
    listed_b = json.loads(b.cli.run("status", "--json", check=True).stdout)
    assert listed_a == listed_b and [j["id"] for j in listed_a] == [job_id]
