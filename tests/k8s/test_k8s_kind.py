"""`fsdp-orch submit --cluster kubernetes` on the real test cluster (tests/k8s/cluster.sh: an API
server, a scheduler, a controller-manager and a kubelet running pods through containerd): the demo
as an Indexed Job of 2 pods, a pod deleted under a running job, a crash then an eviction, a
frozen node, a hang, an image that does not exist, a pod requesting more CPUs than any node has, a
pod over its memory limit, cancel. Every pod uses the host network and this session's Python,
mounted from the host (the K8sCluster fixture's hostPath volumes)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_harness import (
    UNTIL_STOPPED,
    Cli,
    demo_args,
    hf_trainer_hang_on_two_nodes,
    job_events,
    kill_supervisor,
    slow_in_attempt,
    step_losses,
)
from k8s_jobs import ENDED, TWO_PODS, objects_of, pods_of, server_port, write_profile

if TYPE_CHECKING:
    from conftest import K8sCluster

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.root]



def submit(cli: Cli, demo: Path, *extra: str) -> str:
    proc = cli.run("submit", "--cluster", "k8s", str(demo), *TWO_PODS, *extra)
    assert proc.returncode == 0, f"submit exited {proc.returncode}: {proc.stderr}"
    return proc.stdout.strip().splitlines()[-1]


def test_the_demo_runs_as_an_indexed_job_of_two_pods_through_a_supervisor_reattached_mid_run(
        k8s_cluster: K8sCluster, on_k8s) -> None:
    """The demo on 2 pods succeeds; its supervisor, killed mid-run (the submitting machine's
    process gone), is replaced by one that `status` re-attaches, which adopts the attempt whose
    pods still run (the objects its record names) instead of making another."""
    from fsdp_orch.record.store import Store

    cli, demo = on_k8s
    t0 = time.monotonic()
    job_id = submit(cli, demo, "--set", demo_args(20, "--sleep-per-step", "0.3"))
    first = cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 1,
                           timeout=120, what="the first step")
    first_step_s = time.monotonic() - t0
    pods = pods_of(k8s_cluster, job_id, 0)
    assert len(pods) == 2 and all(p.spec.host_network for p in pods), pods
    old = kill_supervisor(cli, job_id)
    assert [p.metadata.name for p in pods_of(k8s_cluster, job_id, 0)] == \
        [p.metadata.name for p in pods], "killing the supervisor must not touch the pods"
    assert cli.status(job_id)["state"] == "RUNNING"  # notices the dead supervisor, re-attaches
    final = cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=300, what="the end")
    assert final["state"] == "SUCCEEDED", final
    assert final["failures"] == [] and final["progress"]["step"] == 20, final
    assert final["attempts"] == 1, final
    assert Store(cli.home / "jobs.db").job(job_id).supervisor_pid != old
    log = (Path(final["run_dir"]) / "supervisor.log").read_text()
    assert f"re-attached to job {job_id} attempt 0" in log, log[-3000:]
    result = json.loads((Path(final["run_dir"]) / "result.json").read_text())
    assert result["world_size"] == 2
    print(f"submit -> first step {first_step_s:.1f} s ({first['progress']})")


@pytest.mark.straggler
def test_a_pod_deleted_under_the_job_resumes_then_a_slow_rank_is_named_and_cancel_deletes_all(
        k8s_cluster: K8sCluster, on_k8s) -> None:
    """One job for three (each was a job of its own, pods started and torch imported each time):
    its pod deleted in attempt 0, the job restarts and attempt 1 resumes from the checkpoint;
    rank 1, slowed by 0.3 s a step in attempt 1, is named a straggler with its pod's node; then
    `cancel` deletes every object of the job, and no object of another job."""
    from kubernetes import client

    cli, demo = on_k8s
    # until stopped, sleeping 0.1 s a step: still training when its pod is deleted in attempt 0
    # and when it is cancelled in attempt 1
    job_id = submit(cli, demo, "--set", demo_args(*UNTIL_STOPPED), "--set",
                    "env.FSDP_ORCH_FAULT=slow:step=0:rank=1:seconds=0.3:attempt=1")
    cli.wait_until(job_id, lambda s: (s.get("last_checkpoint_step") or 0) >= 5,
                   timeout=180, what="a checkpoint at step 5")
    [victim] = [p for p in pods_of(k8s_cluster, job_id, 0)
                if p.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "1"]
    client.CoreV1Api(k8s_cluster.api_client()).delete_namespaced_pod(
        victim.metadata.name, k8s_cluster.namespace, grace_period_seconds=0)

    def console_of_attempt_1(status: dict) -> str:
        console = Path(status["run_dir"]) / "attempt-1" / "console-node-0.log"
        return console.read_text(errors="replace") if console.is_file() else ""

    def steps_of_attempt_1(status: dict) -> list[int]:
        return sorted(step_losses(console_of_attempt_1(status)))

    running = cli.wait_until(job_id, lambda s: len(steps_of_attempt_1(s)) >= 2, timeout=400,
                             what="attempt 1's second step")
    assert running["state"] not in ENDED, running
    [failure] = running["failures"]
    assert failure["category"] == "preemption_or_node_lost", failure
    assert "deleted" in failure["evidence"], failure
    # taken by the cluster, not the job's failure: a new attempt with no restart budget used
    assert failure["progressed"] is True and failure["action"] == "requeue", failure
    assert running["restart_budget"]["failures_without_progress"] == 0, running
    assert running["restart_budget"]["restarts"] == 0, running
    # attempt 1 resumed from attempt 0's checkpoint: the demo restored it (its first step is the
    # one after the checkpoint's, as result.json's resumed_from would say at the end)
    [started] = [e for e in job_events(cli, job_id)
                 if e["kind"] == "attempt_started" and e["attempt"] == 1]
    assert started["resume_step"] >= 5, started
    resumed = f"resumed from {started['resume_from']} (step {started['resume_step']})"
    assert resumed in console_of_attempt_1(running), console_of_attempt_1(running)[-3000:]
    assert min(steps_of_attempt_1(running)) == started["resume_step"] + 1, started

    # rank 1 slowed in attempt 1: named a straggler, the others waiting on it, with its node
    t0 = time.monotonic()
    named = cli.wait_until(job_id, lambda s: any(e["kind"] == "straggler" for e in s["events"]),
                           timeout=180, what="a straggler named")
    [straggler] = [e for e in named["events"] if e["kind"] == "straggler"]
    assert straggler["attempt"] == 1, straggler
    assert straggler["message"].startswith("node 1 (") and "rank 1: the others wait " in \
        straggler["message"], straggler
    print(f"straggler named {time.monotonic() - t0:.1f} s after attempt 1's second step: "
          f"{straggler['message']}")

    # cancel, while attempt 1 trains: every object of the job is deleted, and nothing else: not
    # another user's fsdp-orch job, even one named as an attempt of this job would be
    from fsdp_orch.backends.kubernetes.manifest import object_name

    core = client.CoreV1Api(k8s_cluster.api_client())
    others = [object_name(job_id, 7), "someone-elses-job"]
    for name in others:
        core.create_namespaced_service(k8s_cluster.namespace, {
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "fsdp-orch",
                                                  "fsdp-orch/job-id": "someone-elses-job",
                                                  "fsdp-orch/user": "someone-else"}},
            "spec": {"clusterIP": "None", "ports": [{"port": 1}]}})
    assert objects_of(k8s_cluster, job_id)
    proc = cli.run("cancel", job_id, check=True)
    assert "cancelled" in proc.stdout, proc.stdout
    assert cli.status(job_id)["state"] == "CANCELLED"
    deadline = time.monotonic() + 30
    while objects_of(k8s_cluster, job_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert objects_of(k8s_cluster, job_id) == []
    left = {s.metadata.name for s in core.list_namespaced_service(k8s_cluster.namespace).items}
    assert set(others) <= left, left
    for name in others:
        core.delete_namespaced_service(name, k8s_cluster.namespace)


def test_a_crash_resumes_from_the_latest_checkpoint_and_an_eviction_uses_no_restart_budget(
        k8s_cluster: K8sCluster, on_k8s) -> None:
    """`restart.max_restarts: 1`. Rank 1 crashes at step 8 in attempt 0: the one restart, from
    step 5's checkpoint. Rank 0's pod is then evicted in attempt 1 (the Eviction API, as a drain
    does): taken by the cluster, a new attempt with no restart used, where the cap would have
    stopped the job. Each attempt starts from the latest complete checkpoint, so nothing past the
    last save is trained twice. SUCCEEDED in 3 attempts."""
    from kubernetes import client

    cli, demo = on_k8s
    # attempt 1 trains slowly (0.3 s a step) so that it still trains when its pod is evicted
    faults = ";".join(["crash:step=8:rank=1", *slow_in_attempt(1, 0.3)])
    job_id = submit(cli, demo, "--set", demo_args(40, "--sleep-per-step", "0.05"),
                    "--set", "restart.max_restarts=1", "--set", f"env.FSDP_ORCH_FAULT={faults}")

    def in_attempt_1_with_a_checkpoint(status: dict) -> bool:
        assert status["state"] not in ENDED, status
        return status["attempts"] == 2 and (status.get("last_checkpoint_step") or 0) >= 10
    cli.wait_until(job_id, in_attempt_1_with_a_checkpoint, timeout=300,
                   what="attempt 1's checkpoint at step 10")
    [victim] = [p for p in pods_of(k8s_cluster, job_id, 1)
                if p.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "0"]
    t0 = time.monotonic()
    client.CoreV1Api(k8s_cluster.api_client()).create_namespaced_pod_eviction(
        victim.metadata.name, k8s_cluster.namespace, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=victim.metadata.name,
                                         namespace=k8s_cluster.namespace)))
    final = cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=300, what="the end")
    assert final["state"] == "SUCCEEDED", final
    assert final["attempts"] == 3 and final["progress"]["step"] == 40, final
    crash, evicted = final["failures"]
    assert crash["attempt"] == 0 and crash["action"] == "restart", crash
    # the culprit named: rank 1's own line on node 1, not rank 0 losing its peer on node 0
    assert crash["category"] == "injected_fault" and "rank 1" in crash["evidence"], crash
    assert evicted["attempt"] == 1 and evicted["category"] == "preemption_or_node_lost", evicted
    assert evicted["action"] == "requeue", evicted  # no restart budget used
    assert f"{victim.metadata.name} is being deleted" in evicted["evidence"], evicted
    assert final["restart_budget"]["restarts"] == 1, final["restart_budget"]
    # each attempt started from the latest checkpoint committed before it
    latest, resumed = None, {}
    for event in job_events(cli, job_id):
        if event["kind"] == "checkpoint_committed":
            latest = event["step"]
        elif event["kind"] == "attempt_started" and event["attempt"] > 0:
            resumed[event["attempt"]] = (event["resume_step"], latest)
    assert resumed[1] == (5, 5), resumed
    assert resumed[2][0] == resumed[2][1] and resumed[2][0] >= 10, resumed
    print(f"crash, then eviction: SUCCEEDED {time.monotonic() - t0:.1f} s after the eviction; "
          f"{evicted['evidence']}")


def processes_of_pod(uid: str) -> list[int]:
    """The pids of every process of the pod (its cgroup names the pod's uid)."""
    found = []
    for cgroup in Path("/proc").glob("[0-9]*/cgroup"):
        try:
            text = cgroup.read_text()
        except OSError:
            continue
        if f"pod{uid}" in text or f"pod{uid.replace('-', '_')}" in text:
            found.append(int(cgroup.parent.name))
    return found


def test_a_frozen_node_is_a_lost_node_and_the_job_resumes_once_it_is_back(
        k8s_cluster: K8sCluster, on_k8s) -> None:
    """The machine of pod 1 freezes: SIGSTOP to the kubelet and to every process of the pod (its
    node agent and rank silent; the API still says both pods run, the node Ready). A lost node
    after watch.node_timeout (10 s), under the restart budget (not the cluster's taking); the next
    attempt's pods wait on the frozen kubelet; the node back, the job resumes from the latest
    checkpoint and SUCCEEDED."""
    import os
    import signal

    if not k8s_cluster.local:
        pytest.skip("freezes the test cluster's own kubelet")
    cli, demo = on_k8s
    job_id = submit(cli, demo, "--set", demo_args(60, "--sleep-per-step", "0.1"),
                    "--set", "watch.node_timeout=10s")
    cli.wait_until(job_id, lambda s: (s.get("last_checkpoint_step") or 0) >= 5,
                   timeout=180, what="a checkpoint at step 5")
    [pod] = [p for p in pods_of(k8s_cluster, job_id, 0)
             if p.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "1"]
    kubelet = int((Path(os.environ.get("FSDP_ORCH_K8S_DIR", "/tmp/fsdp-orch-k8s")) / "pids"
                   / "kubelet").read_text().split()[0])
    frozen = [kubelet, *processes_of_pod(pod.metadata.uid)]
    assert len(frozen) > 2, f"no process of pod {pod.metadata.name} found"
    t0 = time.monotonic()
    try:
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        lost = cli.wait_until(job_id, lambda s: bool(s["failures"]), timeout=120,
                              what="the lost node")
        verdict_s = time.monotonic() - t0
    finally:
        os.kill(kubelet, signal.SIGCONT)  # the node back; it kills the old pod's processes
    [failure] = lost["failures"]
    assert failure["category"] == "preemption_or_node_lost", failure
    assert failure["action"] == "restart", failure  # a lost node counts; only a taking does not
    final = cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=300, what="the end")
    assert final["state"] == "SUCCEEDED" and final["attempts"] == 2, final
    assert final["progress"]["step"] == 60, final
    [started] = [e for e in job_events(cli, job_id)
                 if e["kind"] == "attempt_started" and e["attempt"] == 1]
    assert started["resume_step"] >= 5, started
    # the node back, its kubelet ends the old pod (deleted from the API while it was away)
    deadline = time.monotonic() + 120
    while any(Path(f"/proc/{pid}").exists() for pid in frozen[1:]):
        assert time.monotonic() < deadline, "the old pod's processes outlived it"
        time.sleep(1)
    print(f"frozen node: lost after {verdict_s:.1f} s: {failure['evidence']}")


def test_an_unchanged_hf_trainer_hang_is_named_and_resumed_from_its_checkpoint(
        k8s_cluster: K8sCluster, on_k8s, tmp_path: Path) -> None:
    """examples/unchanged/hf_trainer (transformers' Trainer, never importing fsdp_orch), one rank on
    each pod, rank 1 hanging at step 25: the hang named on rank 1, the job SUCCEEDED at step 30,
    attempt 1 resumed from step 20's save (the SSH test's 100 steps, saves every 40 and the hang at
    90 trained 110 steps in all, 35 here: the two attempts' pod starts are most of the time)."""
    cli, _ = on_k8s
    status, job = hf_trainer_hang_on_two_nodes(cli, "k8s", tmp_path, max_steps=30, save_steps=10,
                                               hang_step=25)
    node_sh = (Path(status["run_dir"]) / "attempt-1" / "node.sh").read_text()
    assert f"--resume_from_checkpoint {job.parent / 'out' / 'checkpoint-20'}" in node_sh


def test_a_missing_image_fails_at_once_as_the_users_error(k8s_cluster: K8sCluster,
                                                          on_k8s) -> None:
    cli, demo = on_k8s
    write_profile(cli, k8s_cluster, demo.parents[1], name="k8s",
                  image="fsdp-orch.local/no-such-image:1")
    t0 = time.monotonic()
    job_id = submit(cli, demo, "--set", demo_args(5))
    final = cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=120, what="the end")
    took = time.monotonic() - t0
    assert final["state"] == "FAILED", final
    [failure] = final["failures"]
    assert failure["category"] == "node_setup_error" and failure["action"] == "give_up", failure
    assert "no-such-image" in failure["evidence"], failure
    assert took < 30, f"a missing image took {took:.1f} s to fail"
    print(f"missing image: FAILED {took:.1f} s after submit")


def test_a_secret_that_does_not_exist_fails_at_once_naming_it(k8s_cluster: K8sCluster,
                                                               on_k8s) -> None:
    """env_from_secrets names a Secret the namespace does not hold: the kubelet's
    CreateContainerConfigError is the user's error at once (not a wait, not retried), the Secret
    named."""
    cli, demo = on_k8s
    write_profile(cli, k8s_cluster, demo.parents[1], name="k8s", env_from_secrets=[
        {"env": "WANDB_API_KEY", "secret": "no-such-secret", "key": "key"}])
    t0 = time.monotonic()
    job_id = submit(cli, demo, "--set", demo_args(5))
    final = cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=120, what="the end")
    took = time.monotonic() - t0
    assert final["state"] == "FAILED" and final["attempts"] == 1, final
    [failure] = final["failures"]
    assert failure["category"] == "node_setup_error" and failure["action"] == "give_up", failure
    assert "Secret no-such-secret does not exist" in failure["evidence"], failure
    print(f"missing Secret: FAILED {took:.1f} s after submit: {failure['evidence']}")


def test_requests_no_node_can_hold_say_why_and_the_job_gives_up(k8s_cluster: K8sCluster,
                                                                on_k8s) -> None:
    cli, demo = on_k8s
    write_profile(cli, k8s_cluster, demo.parents[1], name="k8s",
                  resources={"cpu": "64", "memory": "2Gi", "gpus": 0}, unschedulable_timeout=30)
    job_id = submit(cli, demo, "--set", demo_args(5))
    t0 = time.monotonic()

    def scheduler_said(status: dict) -> bool:
        assert status["state"] not in ENDED, status  # said before the job gives up
        # a pod the scheduler has not looked at yet is first "waiting to be scheduled"; its
        # reason follows as a second notice
        return any(e["kind"] == "waiting" and "Unschedulable" in e["message"]
                   for e in status["events"])

    waiting = cli.wait_until(job_id, scheduler_said, timeout=30, what="the scheduler's reason")
    seen_s = time.monotonic() - t0
    [why] = [e["message"] for e in waiting["events"]
             if e["kind"] == "waiting" and "Unschedulable" in e["message"]]
    assert "Insufficient cpu" in why, why
    # 10.8 s in a clean-clone CI at load 4-5 on 2 cores (a few seconds alone): "within seconds",
    # held at twice that load
    assert seen_s < 25, f"the scheduler's reason took {seen_s:.1f} s to show"
    final = cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=120, what="the end")
    assert final["state"] == "FAILED", final
    [failure] = final["failures"]
    assert "unschedulable_timeout" in failure["evidence"], failure
    assert "Insufficient cpu" in failure["evidence"], failure
    print(f"reason shown after {seen_s:.1f} s: {why}")


def test_what_the_api_server_refuses_is_one_line_at_submit_and_nothing_is_left(
        k8s_cluster: K8sCluster, on_k8s) -> None:
    from kubernetes import client

    cli, demo = on_k8s
    core = client.CoreV1Api(k8s_cluster.api_client())
    # a quota that admits no Job: the server's dry run at submit refuses it, naming the quota
    core.create_namespaced_resource_quota(k8s_cluster.namespace, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-jobs"),
        spec=client.V1ResourceQuotaSpec(hard={"count/jobs.batch": "0"})))
    try:
        deadline = time.monotonic() + 30  # the quota controller fills in what is used first
        while not (core.read_namespaced_resource_quota("no-jobs", k8s_cluster.namespace)
                   .status.used) and time.monotonic() < deadline:
            time.sleep(0.2)
        proc = cli.run("submit", "--cluster", "k8s", str(demo), *TWO_PODS, "--set", demo_args(5))
        assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
        [line] = proc.stderr.strip().splitlines()
        assert "exceeded quota" in line and "no-jobs" in line and "Job" in line, line
        print(f"quota: {line}")
    finally:
        core.delete_namespaced_resource_quota("no-jobs", k8s_cluster.namespace)
    # an API server that does not answer: one line naming it, at once
    kubeconfig = demo.parents[1] / "away.kubeconfig"
    kubeconfig.write_text(k8s_cluster.kubeconfig.read_text().replace(
        f"server: https://127.0.0.1:{server_port(k8s_cluster)}", "server: https://127.0.0.1:9"))
    write_profile(cli, k8s_cluster, demo.parents[1], kubeconfig=str(kubeconfig))
    t0 = time.monotonic()
    proc = cli.run("submit", "--cluster", "k8s", str(demo), *TWO_PODS, "--set", demo_args(5))
    took = time.monotonic() - t0
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    [line] = proc.stderr.strip().splitlines()
    assert "does not answer" in line and "127.0.0.1:9" in line, line
    print(f"away: {line} ({took:.1f} s)")
    assert took < 30, took
    for job_id in (p.name for p in (demo.parents[1] / "shared").glob("*/runs/*")):
        assert objects_of(k8s_cluster, job_id) == []
        assert cli.status(job_id)["state"] == "FAILED"


HOG = """\
import time
print("step 1 loss 1.0", flush=True)
held = []
for i in range(64):  # 4 GiB in 64 MiB blocks, each written: resident, not only reserved
    held.append(b"\\x01" * (64 << 20))
    time.sleep(0.02)
print("unreachable: the pod's memory limit is 256Mi", flush=True)
"""


def test_a_pod_over_its_memory_limit_is_named_oomkilled_and_not_retried_as_a_hang(
        k8s_cluster: K8sCluster, on_k8s) -> None:
    """The kubelet's own word for a container killed at its memory limit reaches the failure: the
    kernel's OOM killer (host memory, not the GPU's), with the limit to raise named, in seconds;
    never a hang or a lost node."""
    cli, demo = on_k8s
    write_profile(cli, k8s_cluster, demo.parents[1], name="k8s",
                  resources={"cpu": "500m", "memory": "256Mi", "gpus": 0})
    (demo.parent / "hog.py").write_text(HOG)
    job = demo.parent / "hog.yaml"
    job.write_text("name: hog\nscript: hog.py\nlauncher: python\nnodes: 1\nprocs_per_node: 1\n"
                   "restart: {max_restarts: 0}\nwatch: {startup_timeout: 120s}\n")
    t0 = time.monotonic()
    proc = cli.run("submit", "--cluster", "k8s", str(job))
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().splitlines()[-1]
    final = cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=180, what="the end")
    took = time.monotonic() - t0
    assert final["state"] == "FAILED", final
    [failure] = final["failures"]
    assert failure["category"] == "killed_sigkill", failure
    assert "OOMKilled" in failure["evidence"] and "resources.memory" in failure["evidence"], failure
    print(f"OOMKilled: FAILED {took:.1f} s after submit: {failure['evidence']}")
