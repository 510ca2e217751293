"""`--cluster tpu-vm` on a stand-in for Google Cloud: a FAKE gcloud (tests/fakes/fake_gcloud.py,
first on PATH) answers describe/create/delete and runs `ssh --worker=all` for real; the TPU VM's
workers are two of the real sshd hosts (tests/ssh/hosts.sh), each with its own disk, and run the
CPU path (pjrt_device: CPU; no TPU, no torch_xla here). Everything but the cloud API is real: the
launch on the workers over SSH, the supervisor, the restarts and the checkpoints. The checkpoints go
to a folder every worker sees (as a gcsfuse bucket would be): a re-created VM has empty disks."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import UNTIL_STOPPED, copy_demo, demo_args
from fakes.fake_gcloud import calls, preempt
from tpu_stand import ENDED, TPU, Stand, explained, tpu_stand, verbs

from fsdp_orch.observe.proctree import pid_alive
from fsdp_orch.record.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.root]

STEPS = 30


@pytest.fixture
def stand(ssh_hosts) -> Iterator[Stand]:  # type: ignore[no-untyped-def]
    """A CLI and a copy of the demo in the folder the workers cannot see, a tpu-vm profile that owns
    a spot v4-16 (2 workers: hosts 1 and 2) running this python, and the fake gcloud's state (no
    TPU VM yet)."""
    yield from tpu_stand(ssh_hosts, sys.executable, num_workers=2)


def test_a_two_worker_job_creates_its_tpu_vm_and_succeeds_through_a_supervisor_reattached_mid_run(
        ssh_hosts, stand):
    """One job for two behaviours (each was a job of its own, on a TPU VM of its own): it creates
    its TPU VM and succeeds on both workers; and its supervisor, killed mid-run, is replaced by one
    that `status` re-attaches, which adopts the attempt still running on the workers (their
    addresses come from the attempt's record) instead of starting another."""
    job_id = stand.submit("--set", demo_args(STEPS, "--sleep-per-step", "0.3"), wait=False)
    assert isinstance(job_id, str)
    store = Store(stand.cli.home / "jobs.db")
    stand.cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 3,
                         timeout=180, what="three steps")
    pid = store.job(job_id).supervisor_pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    stand.cli.status(job_id)  # notices the dead supervisor and re-attaches a new one
    status = stand.cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=300,
                                  what="the end")
    assert status["state"] == "SUCCEEDED", explained(status)
    assert status["failures"] == [] and status["progress"]["step"] == STEPS
    # re-attached: one attempt, by a new supervisor
    assert status["attempts"] == 1, status
    assert store.job(job_id).supervisor_pid != pid
    log = (Path(status["run_dir"]) / "supervisor.log").read_text()
    assert f"re-attached to job {job_id} attempt 0" in log, log[-3000:]
    # none existed: created (spot, the profile's type and version), waited for, prepared on each
    # worker
    made = verbs(stand.state)
    assert made[:4] == ["describe", "describe", "create", "describe"], made
    assert made.index("ssh") > made.index("create") and made.count("create") == 1, made
    create = next(c for c in calls(stand.state) if c["verb"] == "create")
    assert set(create["args"]) >= {"--zone=us-central2-b", "--project=fake-project",
                                   "--accelerator-type=v4-16",
                                   "--version=tpu-ubuntu2204-base", "--spot"}, create
    for i in (0, 1):
        assert ssh_hosts.ssh(i, "cat", f"{stand.remote_workdir}/prepared").stdout == "prepared\n"
    # one process per worker, with PJRT_DEVICE=CPU and the worker's index as its rank
    result = json.loads(stand.on_worker(ssh_hosts, 0, job_id, "result.json"))
    assert result["world_size"] == 2 and result["final_step"] == STEPS, result
    for i in (0, 1):
        script = stand.on_worker(ssh_hosts, i, job_id, f"attempt-0/node-{i}.sh")
        assert f"NODE_RANK={i}" in script and "export PJRT_DEVICE=CPU" in script
        assert f"MASTER_ADDR={ssh_hosts.addresses[0]}" in script
    said = [e["message"] for e in status["events"] if e["kind"] == "machines"]
    assert any("creating it" in m for m in said) and any("preparing them" in m for m in said), said


def test_a_hung_worker_is_restarted_on_the_same_tpu_vm_and_a_preempted_one_is_recreated_to_resume(
        ssh_hosts, stand, uninterrupted):
    """Two jobs on one stand (each test had its own TPU VM, and the preemption test ran a clean job
    first, on the VM it then preempted, for its reference numbers): a job whose worker hangs is
    restarted on the same TPU VM; then a second job's VM is preempted mid-run, deleted, created
    again, and the job resumes on it. Both end with the numbers of 2 ranks that never stopped (the
    conftest's uninterrupted run: the same arithmetic, bit for bit, as the hang test of
    test_ssh_backend holds)."""
    reference = uninterrupted(STEPS)
    # a hung worker: restarted on the same TPU VM (not deleted, not created again)
    hung = stand.submit("--set", demo_args(STEPS), "--set",
                        "env.FSDP_ORCH_FAULT=hang:step=12:rank=1",
                        demo=copy_demo(stand.demo.parent.parent / "hung"))
    assert hung["state"] == "SUCCEEDED", explained(hung)
    [failure] = hung["failures"]
    assert failure["category"] == "hang" and failure["action"] == "restart", failure
    assert "rank 1" in failure["evidence"], failure
    assert verbs(stand.state).count("create") == 1 and "delete" not in verbs(stand.state)
    result = json.loads(stand.on_worker(ssh_hosts, 0, hung["id"], "result.json"))
    assert result["resumed_from"] == 10 and result["final_step"] == STEPS, result
    assert result["final_loss"] == reference["final_loss"]
    assert result["param_sha256"] == reference["param_sha256"]

    # a preempted TPU VM: the next job, on the VM the hung one left
    before = len(calls(stand.state))
    job_id = stand.submit("--set", demo_args(STEPS, "--sleep-per-step", "0.3"), wait=False)
    assert isinstance(job_id, str)
    try:
        running = stand.cli.wait_until(job_id, lambda s: (s.get("last_checkpoint_step") or 0) >= 10,
                                       timeout=240, what="a checkpoint of step 10")
        assert running["state"] == "RUNNING", running
        preempt(stand.state, TPU)
        final = stand.cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=300,
                                     what="the end")
    finally:
        if stand.cli.status(job_id)["state"] not in ENDED:
            stand.cli.run("cancel", job_id)
    assert final["state"] == "SUCCEEDED", explained(final)
    [failure] = final["failures"]
    assert (failure["category"] == "preemption_or_node_lost"
            and failure["action"] == "restart"), failure
    assert f"TPU VM {TPU} is PREEMPTED" in failure["evidence"], failure
    # after the preemption: seen in describe, deleted, created, waited for, prepared, relaunched
    # (the job's first attempt prepares the workers again: a new supervisor has not prepared them)
    after = [c["verb"] for c in calls(stand.state)[before:]]
    assert [v for v in after if v != "describe"] == ["ssh", "delete", "create", "ssh"], after
    assert after[after.index("delete") - 1] == "describe", after
    # resumed from the checkpoint in the bucket, on the new VM's empty disks, to the numbers of
    # the run that never stopped
    result = json.loads(stand.on_worker(ssh_hosts, 0, job_id, "result.json"))
    assert result["resumed_from"] is not None and result["resumed_from"] >= 10, result
    assert result["final_step"] == STEPS
    assert result["final_loss"] == reference["final_loss"]
    assert result["param_sha256"] == reference["param_sha256"]
    assert ssh_hosts.ssh(0, "ls", f"{stand.remote_workdir}/runs",
                         check=False).stdout.split() == [job_id], \
        "the re-created VM's disk still has the earlier jobs"


def test_cancel_stops_the_job_on_every_worker(ssh_hosts, stand):
    job_id = stand.submit("--set", demo_args(*UNTIL_STOPPED), wait=False)
    assert isinstance(job_id, str)
    stand.cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 3,
                         timeout=180, what="three steps")
    assert all(ssh_hosts.job_processes(i, job_id) for i in (0, 1)), "a worker does not run the job"
    assert "cancelled" in stand.cli.run("cancel", job_id, check=True).stdout
    assert stand.cli.status(job_id)["state"] == "CANCELLED"
    for i in (0, 1):
        assert ssh_hosts.job_processes(i, job_id) == [], f"worker {i} still runs the job"
    assert "delete" not in verbs(stand.state), "cancel must not delete a TPU VM"
