"""`--cluster tpu-vm` on a stand-in for Google Cloud: a FAKE gcloud (tests/fakes/fake_gcloud.py,
first on PATH) answers describe/create/delete and runs `ssh --worker=all` for real; the TPU VM's
workers are two of the real sshd hosts (tests/ssh/hosts.sh), each with its own disk, and run the
CPU path (pjrt_device: CPU; no TPU, no torch_xla here). Everything but the cloud API is real: the
launch on the workers over SSH, the supervisor, the restarts and the checkpoints. The checkpoints go
to a folder every worker sees (as a gcsfuse bucket would be): a re-created VM has empty disks."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import (
    UNTIL_STOPPED,
    attempt_log,
    demo_args,
    job_events,
    kill_supervisor,
    slow_in_attempt,
    step_losses,
)
from fakes.fake_gcloud import calls, preempt
from tpu_stand import ENDED, TPU, Stand, explained, tpu_stand, verbs

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
    pid = kill_supervisor(stand.cli, job_id)
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
    """One job, two faults (each was a job of its own, on one TPU VM, and before that on a VM of
    its own): a worker hangs in attempt 0, and the job is restarted on the same TPU VM; then, once
    attempt 1 has saved a checkpoint of its own, the VM is preempted, deleted, created again, and
    attempt 2 resumes on it. It ends with the numbers of 2 ranks that never stopped (the conftest's
    uninterrupted run: the same arithmetic, bit for bit, as the hang test of test_ssh_backend
    holds), after both resumes."""
    reference = uninterrupted(STEPS)
    # attempt 1 alone sleeps a step: still training when the VM is taken away after its save of
    # step 15 (15 steps, 7.5 s, to come), and attempts 0 and 2 train at full speed
    faults = ";".join(["hang:step=12:rank=1", *slow_in_attempt(1, 0.5)])
    job_id = stand.submit("--set", demo_args(STEPS), "--set", f"env.FSDP_ORCH_FAULT={faults}",
                          wait=False)
    assert isinstance(job_id, str)
    try:
        running = stand.cli.wait_until(
            job_id, lambda s: s["state"] in ENDED or (s.get("last_checkpoint_step") or 0) >= 15,
            timeout=300, what="attempt 1's checkpoint of step 15")
        assert running["state"] == "RUNNING" and running["attempts"] == 2, explained(running)
        # the hung worker: restarted on the same TPU VM (not deleted, not created again)
        [failure] = running["failures"]
        assert failure["category"] == "hang" and failure["action"] == "restart", failure
        assert "rank 1" in failure["evidence"], failure
        assert verbs(stand.state).count("create") == 1 and "delete" not in verbs(stand.state)
        # the preempted TPU VM: the VM the restarted attempt runs on
        before = len(calls(stand.state))
        preempt(stand.state, TPU)
        final = stand.cli.wait_until(job_id, lambda s: s["state"] in ENDED, timeout=300,
                                     what="the end")
    finally:
        if stand.cli.status(job_id)["state"] not in ENDED:
            stand.cli.run("cancel", job_id)
    assert final["state"] == "SUCCEEDED", explained(final)
    assert final["attempts"] == 3 and final["failures"][0] == failure, explained(final)
    preempted = final["failures"][1]
    assert (preempted["category"] == "preemption_or_node_lost"
            and preempted["action"] == "restart"), preempted
    assert f"TPU VM {TPU} is PREEMPTED" in preempted["evidence"], preempted
    # after the preemption: seen in describe, deleted, created, waited for, prepared, relaunched
    after = [c["verb"] for c in calls(stand.state)[before:]]
    assert [v for v in after if v != "describe"] == ["delete", "create", "ssh"], after
    assert after[after.index("delete") - 1] == "describe", after
    # the hang's restart resumed from step 10's checkpoint; the preemption's from attempt 1's, in
    # the bucket, on the new VM's empty disks: to the numbers of the run that never stopped
    resumed = [e["resume_step"] for e in job_events(stand.cli, job_id)
               if e["kind"] == "attempt_started"]
    assert resumed[:2] == [None, 10] and resumed[2] >= 15, resumed
    trained = step_losses(attempt_log(final["run_dir"], 1, "console-node-0.log"))
    assert min(trained) == 11 and max(trained) >= 15, sorted(trained)  # restored step 10's
    result = json.loads(stand.on_worker(ssh_hosts, 0, job_id, "result.json"))
    assert result["resumed_from"] == resumed[2] and result["final_step"] == STEPS, result
    assert result["final_loss"] == reference["final_loss"]
    assert result["param_sha256"] == reference["param_sha256"]
    left = ssh_hosts.ssh(0, "ls", f"{stand.remote_workdir}/runs/{job_id}", check=False).stdout
    assert "attempt-2" in left.split() and not {"attempt-0", "attempt-1"} & set(left.split()), \
        f"the re-created VM's disk still has the earlier attempts: {left}"


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
