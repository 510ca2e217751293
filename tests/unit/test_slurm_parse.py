"""SLURM output parsing against output captured from the real test cluster
(tests/fixtures/slurm)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fsdp_orch.backends.slurm.parse import latest_by_job, parse_sacct, steps_of
from fsdp_orch.vocab.states import JobState

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def by_name(text: str) -> dict:
    return {job.name: job for job in latest_by_job(parse_sacct(text)).values()}


def test_every_ended_state_maps_to_ours():
    jobs = by_name((FIXTURES / "sacct-backend.txt").read_text())
    expected = {
        "fx-completed": JobState.SUCCEEDED, "fx-failed": JobState.FAILED,
        "fx-killed": JobState.FAILED,
        "fx-step-failed": JobState.SUCCEEDED, "fx-cancelled": JobState.CANCELLED,
        "fx-timeout": JobState.FAILED, "fx-pending": JobState.CANCELLED,
        "fx-requeued": JobState.CANCELLED,
        "fx-urgent": JobState.SUCCEEDED, "fx-preempted": JobState.CANCELLED,
    }
    assert {name: job.mapped_state for name, job in jobs.items()} == expected
    assert jobs["fx-cancelled"].state == "CANCELLED"  # "CANCELLED by 0": the uid tail is dropped
    assert jobs["fx-failed"].exit_code == "3:0" and jobs["fx-killed"].exit_code == "0:9"
    assert jobs["fx-pending"].nodes == "None assigned" and jobs["fx-pending"].start == "None"


def test_live_records_and_steps():
    # sacct-live.txt has the column order of sacct.txt (NodeList before the times); ids, names,
    # states and exit codes come first in both, and those are what is compared here.
    jobs = parse_sacct((FIXTURES / "sacct-live.txt").read_text())
    records = latest_by_job(jobs)
    assert {r.state for r in records.values()} == {"RUNNING", "PENDING"}
    assert [s.job_id for s in steps_of(jobs, "6")] == ["6.batch", "6.0"]
    assert records["7"].mapped_state is JobState.PENDING


def test_preempted_and_requeued_runs_keep_the_latest_record():
    text = (FIXTURES / "sacct-preempted.txt").read_text()
    records = latest_by_job(parse_sacct(text))
    assert records["9"].state == "PENDING"  # the run after PREEMPTED, listed last
    assert records["10"].mapped_state is JobState.RUNNING


def test_a_reused_slurm_id_is_recognised_by_its_name():
    line = ("77|someone-elses-job|RUNNING|0:0|2026-11-21T13:26:12|2026-11-21T13:26:14|Unknown|"
            "node1\n")
    [job] = parse_sacct(line)
    assert job.ours is None
    [ours] = parse_sacct(line.replace("someone-elses-job", "fsdp-orch-0123456789ab"))
    assert ours.ours == "0123456789ab"


def test_garbage_lines_are_skipped_not_fatal():
    assert parse_sacct("sacct: error: something\n\n|||\n") == []


def test_the_batch_script_carries_the_profile_and_runs_the_supervisor(tmp_path):
    """What sbatch is given: every scheduler option from the profile, the job name the status
    refresh recognises, the signal before the time limit sent to the batch shell, and the
    supervisor."""
    from planning import SUPERVISOR, plan_on, render

    from fsdp_orch.backends.slurm.kind import SlurmProfile
    from fsdp_orch.jobspec.schema import JobSpec
    from fsdp_orch.launch.plan_inputs import PlanContext

    profile = SlurmProfile.model_validate({
        "kind": "slurm", "partition": "gpu", "account": "ml", "time": "02:00:00",
        "gpus_per_node": 4, "cpus_per_task": 16, "setup": ["module load cuda"],
        "sbatch_extra": {"exclusive": True, "mail-type": "END"}})
    job = JobSpec.model_validate({"name": "x y", "script": "train.py", "nodes": 3})
    ctx = PlanContext(job_id="abc", attempt=0, run_root=str(tmp_path), job_dir=str(tmp_path),
                      supervisor_command=SUPERVISOR)
    artifacts = {a.path: a.text for a in render(plan_on(job, profile, "slurm", ctx))}
    batch = artifacts[f"{tmp_path}/runs/abc/sbatch.sh"]
    for line in (
        "#SBATCH --job-name=fsdp-orch-abc", "#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --time=02:00:00", "#SBATCH --gpus-per-node=4", "#SBATCH --cpus-per-task=16",
        "#SBATCH --partition=gpu", "#SBATCH --account=ml", "#SBATCH --exclusive",
        "#SBATCH --mail-type=END", "#SBATCH --signal=B:USR2@120", "module load cuda",
        f"#SBATCH --chdir={tmp_path}/runs/abc",
        f"exec python3 -m fsdp_orch.supervise.supervisor abc --run-dir {tmp_path}/runs/abc "
        "--in-allocation"):
        assert line in batch.splitlines(), line
    assert f"{tmp_path}/runs/abc/attempt-0/node.sh" in artifacts


def test_render_shows_the_batch_script_sbatch_is_given(tmp_path):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "fsdp_orch", "render", "--cluster", "slurm",
                          str(repo / "examples" / "demo" / "job.yaml"), "--set", "nodes=2",
                          "--job-id", "abc123"], capture_output=True, text=True, check=True,
                         cwd=repo, env={**os.environ, "FSDP_ORCH_HOME": str(tmp_path)}).stdout
    header = f"==> {tmp_path}/runs/abc123/sbatch.sh <=="
    assert header in out
    batch = out.split(header, 1)[1].split("==> ", 1)[0]
    assert "#SBATCH --job-name=fsdp-orch-abc123" in batch and "#SBATCH --nodes=2" in batch
    assert "#SBATCH --ntasks-per-node=1" in batch and "#SBATCH --signal=B:USR2@120" in batch
    # the profile's python (python3 on the nodes by default), never this CLI's (issue 62)
    assert ("exec python3 -m fsdp_orch.supervise.supervisor abc123 --run-dir "
            f"{tmp_path}/runs/abc123 --in-allocation") in batch
    assert sys.executable not in out
    # run once per node, per attempt
    assert f"==> {tmp_path}/runs/abc123/attempt-0/node.sh <==" in out


def test_a_profile_with_a_shared_dir_puts_the_run_folder_there_not_in_the_private_home(tmp_path):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    profile = tmp_path / "clusters" / "hpc.yaml"
    profile.parent.mkdir()
    profile.write_text((repo / "clusters" / "slurm.yaml").read_text()
                       + "shared_dir: /lustre/me/fsdp-orch\n")
    out = subprocess.run([sys.executable, "-m", "fsdp_orch", "render", "--cluster", "hpc",
                          str(repo / "examples" / "demo" / "job.yaml"), "--job-id", "abc123"],
                         capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={**os.environ, "FSDP_ORCH_HOME": str(tmp_path / "private")}).stdout
    from fsdp_orch.places.private import user_name

    runs = f"/lustre/me/fsdp-orch/{user_name()}/runs"  # this user's own root in the shared dir
    assert f"==> {runs}/abc123/sbatch.sh <==" in out
    assert f"#SBATCH --chdir={runs}/abc123" in out
    assert f"--run-dir {runs}/abc123 --in-allocation" in out
    assert str(tmp_path / "private") not in out


def test_a_node_failure_is_recorded_and_resubmitted_while_the_budget_allows(tmp_path):
    """The refresh logic with a stand-in for sacct (a NODE_FAIL takes minutes to provoke on the
    real cluster: slurmctld waits SlurmdTimeout before it declares a node dead)."""
    import json

    from fsdp_orch.backends.slurm.kind import refresh
    from fsdp_orch.backends.slurm.parse import SlurmJob
    from fsdp_orch.control.job_control import record_submission
    from fsdp_orch.control.submit_request import SubmitRequest
    from fsdp_orch.record.index import JobIndex
    from fsdp_orch.record.store import Store

    job = tmp_path / "job.yaml"
    job.write_text("name: n\nlauncher: python\ncommand: ['true']\nrestart: {max_restarts: 1}\n")
    index = JobIndex(Store(tmp_path / "home" / "jobs.db"), [str(tmp_path / "home" / "runs")])
    store = index.store
    job_id, _, _ = record_submission(index, SubmitRequest(job, "slurm", home_dir=tmp_path / "home"))
    index.journal(job_id).scheduled("slurm:41")
    index.journal(job_id).start_attempt(0, resume_from=None)
    resubmitted = []

    def lost(ids):
        return {"41": SlurmJob("41", f"fsdp-orch-{job_id}", "NODE_FAIL", "0:0", "", "", "",
                               "node2")}

    refresh(index, store.active_jobs(), query_fn=lost,
            resubmit_fn=lambda st, sub, first: resubmitted.append(sub.job_id))
    status = json.loads(store.status_json(job_id))
    assert resubmitted == [job_id] and status["state"] == "RESTARTING"
    assert [(f["category"], f["action"]) for f in status["failures"]] == [
        ("preemption_or_node_lost", "resubmit")]

    # the resubmitted job ran, and lost a node again
    index.journal(job_id).start_attempt(1, resume_from=None)
    refresh(index, store.active_jobs(), query_fn=lost,
            resubmit_fn=lambda st, sub, first: resubmitted.append(sub.job_id))
    status = json.loads(store.status_json(job_id))
    assert resubmitted == [job_id] and status["state"] == "FAILED"
    assert status["failures"][-1]["action"] == "give_up" and "NODE_FAIL" in status["reason"]


def test_an_end_the_supervisor_recorded_is_not_recorded_again_from_sacct(tmp_path):
    """The supervisor wrote the job's end into its run folder; the index has not read it yet when a
    status poll finds the allocation COMPLETED in sacct: no second end from the poll (its status
    JSON showed another end time and goodput than every later read)."""
    import json

    from fsdp_orch.backends.slurm.kind import refresh
    from fsdp_orch.backends.slurm.parse import SlurmJob
    from fsdp_orch.control.job_control import record_submission
    from fsdp_orch.control.submit_request import SubmitRequest
    from fsdp_orch.record.events import EventWriter, read_job
    from fsdp_orch.record.index import JobIndex
    from fsdp_orch.record.journal import Journal
    from fsdp_orch.record.store import Store
    from fsdp_orch.vocab.states import JobState

    job = tmp_path / "job.yaml"
    job.write_text("name: n\nlauncher: python\ncommand: ['true']\n")
    index = JobIndex(Store(tmp_path / "home" / "jobs.db"), [str(tmp_path / "home" / "runs")])
    job_id, _, _ = record_submission(index, SubmitRequest(job, "slurm", home_dir=tmp_path / "home"))
    index.journal(job_id).scheduled("slurm:41")
    index.journal(job_id).start_attempt(0, resume_from=None)
    rows = index.store.active_jobs()
    supervisor = Journal(EventWriter(rows[0].run_dir, "supervisor"), job_id)
    supervisor.set_state(JobState.SUCCEEDED, reason="all ranks exited 0", now=1000.0)

    def completed(ids):
        return {"41": SlurmJob("41", f"fsdp-orch-{job_id}", "COMPLETED", "0:0", "", "", "",
                               "node1")}

    assert refresh(index, rows, query_fn=completed) == []
    index.ingest([job_id])
    status = json.loads(index.store.status_json(job_id))
    assert status["state"] == "SUCCEEDED" and status["reason"] == "all ranks exited 0"
    ends = [e for e in read_job(rows[0].run_dir)[0] if e["kind"] == "finished"]
    assert [e["at"] for e in ends] == [1000.0]


@pytest.mark.parametrize("cluster", ["slurm", "ssh", "tpu-vm", "local"])
def test_render_needs_no_cluster_tools_on_the_path(tmp_path, cluster):
    """A laptop or a CI runner: no sbatch, srun, sacct, ssh or gcloud anywhere. The same artifacts
    come out as with them."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    nodes = {"slurm": "2", "ssh": "2", "tpu-vm": "1", "local": "1"}[cluster]
    launcher = ["--set", "launcher=xla"] if cluster == "tpu-vm" else []
    argv = [sys.executable, "-m", "fsdp_orch", "render", "--cluster", cluster,
            str(repo / "examples" / "demo" / "job.yaml"), "--set", f"nodes={nodes}", *launcher,
            "--job-id", "abc123"]
    env = {**os.environ, "FSDP_ORCH_HOME": str(tmp_path)}
    with_slurm = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=repo, env=env)
    bare = subprocess.run(argv, capture_output=True, text=True, cwd=repo,
                          env={**env, "PATH": str(tmp_path / "empty")})
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout == with_slurm.stdout and bare.stdout.count("<==") >= 1
