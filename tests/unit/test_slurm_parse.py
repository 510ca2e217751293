"""SLURM output parsing against output captured from the real test cluster (tests/fixtures/slurm)."""

from __future__ import annotations

import os
from pathlib import Path

from fsdp_orch.backends.slurm import executor_parameters, time_minutes
from fsdp_orch.backends.slurm_parse import latest_by_job, parse_sacct, steps_of
from fsdp_orch.states import JobState

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def by_name(text: str) -> dict:
    return {job.name: job for job in latest_by_job(parse_sacct(text)).values()}


def test_every_ended_state_maps_to_ours():
    jobs = by_name((FIXTURES / "sacct-backend.txt").read_text())
    expected = {
        "fx-completed": JobState.SUCCEEDED, "fx-failed": JobState.FAILED, "fx-killed": JobState.FAILED,
        "fx-step-failed": JobState.SUCCEEDED, "fx-cancelled": JobState.CANCELLED,
        "fx-timeout": JobState.FAILED, "fx-pending": JobState.CANCELLED, "fx-requeued": JobState.CANCELLED,
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
    line = "77|someone-elses-job|RUNNING|0:0|2026-11-21T13:26:12|2026-11-21T13:26:14|Unknown|node1\n"
    [job] = parse_sacct(line)
    assert job.ours is None
    [ours] = parse_sacct(line.replace("someone-elses-job", "fsdp-orch-0123456789ab"))
    assert ours.ours == "0123456789ab"


def test_garbage_lines_are_skipped_not_fatal():
    assert parse_sacct("sacct: error: something\n\n|||\n") == []


def test_time_limits_in_minutes():
    assert [time_minutes(t) for t in ("30", "45:30", "01:00:00", "1-00", "2-12:30:00", "0:10")] == \
        [30, 46, 60, 1440, 3630, 1]


def test_executor_parameters_come_from_the_profile_and_the_plan(tmp_path):
    from fsdp_orch.backends.base import Submission
    from fsdp_orch.profiles import SlurmProfile
    from fsdp_orch.spec import JobSpec

    profile = SlurmProfile.model_validate({
        "kind": "slurm", "partition": "gpu", "account": "ml", "time": "02:00:00", "gpus_per_node": 4,
        "cpus_per_task": 16, "setup": ["module load cuda"], "sbatch_extra": {"exclusive": True,
                                                                              "mail-type": "END"}})
    job = JobSpec.model_validate({"name": "x y", "script": "train.py", "nodes": 3})
    sub = Submission(job_id="abc", cluster="slurm", job=job, profile=profile, job_dir=str(tmp_path),
                     home=str(tmp_path))
    params = executor_parameters(sub)
    assert params["job_name"] == "fsdp-orch-abc"
    assert params["nodes"] == 3 and params["ntasks_per_node"] == 1
    assert params["time"] == 120 and params["gpus_per_node"] == 4 and params["cpus_per_task"] == 16
    assert params["partition"] == "gpu" and params["account"] == "ml"
    assert params["setup"] == ["module load cuda"]
    assert params["additional_parameters"] == {"exclusive": "", "mail-type": "END"}


def test_render_shows_the_batch_script_submitit_will_submit(tmp_path):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "fsdp_orch", "render", "--cluster", "slurm",
                          str(repo / "examples" / "demo" / "job.yaml"), "--set", "nodes=2",
                          "--job-id", "abc123"], capture_output=True, text=True, check=True, cwd=repo,
                         env={**os.environ, "FSDP_ORCH_HOME": str(tmp_path)}).stdout
    header = f"==> {tmp_path}/runs/abc123/submitit/sbatch-submitit.sh <=="
    assert header in out
    batch = out.split(header, 1)[1]
    assert "#SBATCH --job-name=fsdp-orch-abc123" in batch and "#SBATCH --nodes=2" in batch
    assert "#SBATCH --ntasks-per-node=1" in batch and "#SBATCH --signal=USR2@120" in batch
    assert "-m submitit.core._submit" in batch
    assert f"==> {tmp_path}/runs/abc123/attempt-0/node.sh <==" in out  # run once per node, per attempt


def test_a_node_failure_is_recorded_and_resubmitted_while_the_budget_allows(tmp_path):
    """The refresh logic with a stand-in for sacct (a NODE_FAIL takes minutes to provoke on the
    real cluster: slurmctld waits SlurmdTimeout before it declares a node dead)."""
    import json

    from fsdp_orch.backends.slurm import refresh
    from fsdp_orch.backends.slurm_parse import SlurmJob
    from fsdp_orch.store import Store
    from fsdp_orch.submit import record_submission

    job = tmp_path / "job.yaml"
    job.write_text("name: n\nlauncher: python\ncommand: ['true']\nrestart: {max_restarts: 1}\n")
    store = Store(tmp_path / "home" / "jobs.db")
    job_id, _, _ = record_submission(store, job, "slurm", home_dir=tmp_path / "home")
    store.update(job_id, backend_ref="slurm:41")
    store.start_attempt(job_id, 0, resume_from=None)
    resubmitted = []

    def lost(ids):
        return {"41": SlurmJob("41", f"fsdp-orch-{job_id}", "NODE_FAIL", "0:0", "", "", "", "node2")}

    refresh(store, store.active_jobs(), query_fn=lost, resubmit_fn=lambda st, sub: resubmitted.append(sub.job_id))
    status = json.loads(store.status_json(job_id))
    assert resubmitted == [job_id] and status["state"] == "RESTARTING"
    assert [(f["category"], f["action"]) for f in status["failures"]] == [("preemption_or_node_lost", "resubmit")]

    store.start_attempt(job_id, 1, resume_from=None)  # the resubmitted job ran, and lost a node again
    refresh(store, store.active_jobs(), query_fn=lost, resubmit_fn=lambda st, sub: resubmitted.append(sub.job_id))
    status = json.loads(store.status_json(job_id))
    assert resubmitted == [job_id] and status["state"] == "FAILED"
    assert status["failures"][-1]["action"] == "give_up" and "NODE_FAIL" in status["reason"]
