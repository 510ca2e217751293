"""The supervisor in the cluster (`supervisor.runs: cluster`) on the real test cluster: submit makes
the supervisor's own Job, whose pod (a service account bound to the Role of docs/kubernetes.md, and
nothing more) runs the demo's attempts; the supervisor's pod deleted mid-run, Kubernetes makes
another, which re-attaches to the attempt that runs and, after a crash, makes the next attempt
with the pod's token; nothing runs on the submitting machine; the job SUCCEEDED, and every object
is gone after it. Then `cancel` of a second job: the supervisor in
its pod stops the attempt, and every object goes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cli_harness import UNTIL_STOPPED, demo_args, job_events
from k8s_jobs import (
    ENDED,
    TWO_PODS,
    objects_of,
    pods_of,
    server_port,
    wait_for_no_objects,
    write_profile,
)

if TYPE_CHECKING:
    from conftest import K8sCluster

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.root]

def supervisor_pods(cluster: K8sCluster, job_id: str) -> list[Any]:
    return [p for p in pods_of(cluster, job_id)
            if (p.metadata.labels or {}).get("fsdp-orch/role") == "supervisor"]


def test_the_supervisor_in_its_pod_outlives_that_pod_and_nothing_runs_here(
        k8s_cluster: K8sCluster, on_k8s, supervisor_account: str) -> None:
    from kubernetes import client

    cli, demo = on_k8s
    api_server = f"https://127.0.0.1:{server_port(k8s_cluster)}"
    write_profile(cli, k8s_cluster, demo.parents[1], supervisor={
        "runs": "cluster", "service_account": supervisor_account, "api_server": api_server})
    # rank 1 crashes at step 20: the next attempt is the replacement supervisor's to make
    proc = cli.run("submit", "--cluster", "k8s", str(demo), *TWO_PODS,
                   "--set", demo_args(30, "--sleep-per-step", "0.3"),
                   "--set", "env.FSDP_ORCH_FAULT=crash:step=20:rank=1")
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().splitlines()[-1]
    run_dir = Path(cli.status(job_id)["run_dir"])
    assert (run_dir / "supervisor-job.yaml").is_file()
    at_step = cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 3,
                             timeout=180, what="the third step")["progress"]["step"]
    [first] = supervisor_pods(k8s_cluster, job_id)
    # the supervisor's pod goes (its node drained, say): Kubernetes makes another, which adopts
    # the attempt; the ranks' pods are untouched
    ranks = sorted(p.metadata.name for p in pods_of(k8s_cluster, job_id, 0))
    deleted_at = time.time()
    client.CoreV1Api(k8s_cluster.api_client()).delete_namespaced_pod(
        first.metadata.name, k8s_cluster.namespace)
    final = cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=300, what="the end")
    assert final["state"] == "SUCCEEDED", final
    assert final["attempts"] == 2 and final["progress"]["step"] == 30, final
    [crash] = final["failures"]
    assert crash["attempt"] == 0 and crash["action"] == "restart", crash
    assert not [p for p in pods_of(k8s_cluster, job_id, 0) if p.metadata.name in ranks]
    log = (run_dir / "supervisor.log").read_text()
    assert f"re-attached to job {job_id} attempt 0" in log, log[-3000:]
    # two supervisors, each pid 1 of its pod: none started beside the CLI (status re-attaches
    # none here), whose pid would be this machine's
    starts = [e for e in job_events(cli, job_id) if e["kind"] == "supervisor_started"]
    assert [e["pid"] for e in starts] == [1, 1], starts
    started = [e["at"] for e in starts]
    assert started[1] > deleted_at, started
    print(f"the supervisor's pod deleted at step {at_step}: the next pod's supervisor started "
          f"{started[1] - deleted_at:.1f} s later")
    assert json.loads((run_dir / "result.json").read_text())["world_size"] == 2
    assert wait_for_no_objects(k8s_cluster, job_id) == [], "the supervisor's Job was left"
    assert oct((run_dir / "supervisor.log").stat().st_mode & 0o777) == "0o600"


def test_cancel_reaches_the_supervisor_in_its_pod(k8s_cluster: K8sCluster, on_k8s,
                                                  supervisor_account: str) -> None:
    cli, demo = on_k8s
    write_profile(cli, k8s_cluster, demo.parents[1], supervisor={
        "runs": "cluster", "service_account": supervisor_account,
        "api_server": f"https://127.0.0.1:{server_port(k8s_cluster)}"})
    proc = cli.run("submit", "--cluster", "k8s", str(demo), *TWO_PODS,
                   "--set", demo_args(*UNTIL_STOPPED))
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().splitlines()[-1]
    cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 2,
                   timeout=180, what="the second step")
    t0 = time.monotonic()
    out = cli.run("cancel", job_id, check=True).stdout
    took = time.monotonic() - t0
    assert "cancelled" in out, out
    assert cli.status(job_id)["state"] == "CANCELLED"
    assert wait_for_no_objects(k8s_cluster, job_id) == []
    log = (Path(cli.status(job_id)["run_dir"]) / "supervisor.log").read_text()
    assert f"job {job_id} ended CANCELLED" in log, log[-3000:]
    print(f"cancel took {took:.1f} s")


def test_a_supervisor_account_that_does_not_exist_is_one_line_at_submit_and_nothing_is_left(
        k8s_cluster: K8sCluster, on_k8s) -> None:
    """The server's dry run of the supervisor's Job passes (a Job's pods are admitted only when its
    controller makes them); its pod is refused: submit says so in one line, exit 2, and deletes
    what it made."""
    cli, demo = on_k8s
    profile = write_profile(cli, k8s_cluster, demo.parents[1], supervisor={
        "runs": "cluster", "service_account": "no-such-account",
        "api_server": f"https://127.0.0.1:{server_port(k8s_cluster)}"})
    t0 = time.monotonic()
    proc = cli.run("submit", "--cluster", "k8s", str(demo), *TWO_PODS, "--set", demo_args(5))
    took = time.monotonic() - t0
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    [line] = proc.stderr.strip().splitlines()
    assert "made no pod" in line and "'no-such-account'" in line, line
    assert f"{profile}: supervisor.service_account: " in line, line
    [job_id] = [p.name for p in (demo.parents[1] / "shared").glob("*/runs/*")]
    assert objects_of(k8s_cluster, job_id) == []
    assert cli.status(job_id)["state"] == "FAILED"
    print(f"{line} ({took:.1f} s)")
