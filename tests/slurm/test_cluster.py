"""Smoke tests of the real test SLURM cluster: what the slurm backend's tests rely on."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # tests/ is no package: the fixture's class is for readers and type checkers
    from conftest import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.root]


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body)
    return path


def wait_for_text(path: Path, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {path} after {timeout}s:\n{content}")


def test_two_nodes_run_one_task_each(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script = write_script(tmp_path / "job.sh",
                          'srun bash -c \'echo "$SLURM_PROCID $SLURMD_NODENAME $(hostname)"\'\n')
    job = slurm_cluster.sbatch("-N", "2", "--ntasks-per-node=1", "-o", "out.txt", str(script),
                               cwd=tmp_path)
    assert slurm_cluster.wait_done(job) == "COMPLETED"
    host = socket.gethostname()
    assert sorted((tmp_path / "out.txt").read_text().splitlines()) == [f"0 node1 {host}",
                                                                      f"1 node2 {host}"]


def test_steps_in_sequence_and_overlapping_show_in_sacct(slurm_cluster: SlurmCluster,
                                                         tmp_path: Path) -> None:
    # Step 1 holds the allocation's CPUs; only --overlap lets step 2 start beside it.
    script = write_script(tmp_path / "job.sh", "srun true\n"
                          "srun sleep 4 &\n"
                          "sleep 1\n"
                          "srun --overlap true\n"
                          "wait\n")
    job = slurm_cluster.sbatch("-N", "2", "--ntasks-per-node=1", "-o", "out.txt", str(script),
                               cwd=tmp_path)
    assert slurm_cluster.wait_done(job) == "COMPLETED"
    rows = {r["JobID"]: r
            for r in slurm_cluster.sacct(job, "JobID", "State", "NodeList", "Start", "End")}
    for step in ("0", "1", "2"):
        assert rows[f"{job}.{step}"]["State"] == "COMPLETED", rows
        assert rows[f"{job}.{step}"]["NodeList"] == "node[1-2]", rows
    assert rows[f"{job}.2"]["End"] < rows[f"{job}.1"]["End"], "the --overlap step waited for step 1"


def test_scancel_ends_a_job_as_cancelled(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = slurm_cluster.sbatch("--wrap", "sleep 300", "-o", "out.txt", cwd=tmp_path)
    slurm_cluster.wait_for(job, {"RUNNING"}, accounted=False)
    slurm_cluster.run("scancel", job)
    assert slurm_cluster.wait_done(job) == "CANCELLED"


def test_requeue_runs_the_job_again(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script = write_script(tmp_path / "job.sh",
                          'echo "run ${SLURM_RESTART_COUNT:-0}"\nsleep 300\n')
    job = slurm_cluster.sbatch("--open-mode=append", "-o", "out.txt", str(script), cwd=tmp_path)
    try:
        wait_for_text(tmp_path / "out.txt", "run 0")
        slurm_cluster.run("scontrol", "requeue", job)
        # A requeued job waits cred_expire (10 s on this cluster) before it may start again.
        wait_for_text(tmp_path / "out.txt", "run 1", timeout=60)
        details = slurm_cluster.run("scontrol", "show", "job", job).stdout
        assert "Restarts=1" in details
        # sacct hears of the second start a moment after the job itself.
        deadline = time.monotonic() + 15
        while True:
            runs = slurm_cluster.sacct(job, "JobID", "State", duplicates=True)
            states = [r["State"] for r in runs if r["JobID"] == job]
            if states == ["REQUEUED", "RUNNING"] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert states == ["REQUEUED", "RUNNING"]
    finally:
        slurm_cluster.run("scancel", job, check=False)


def test_higher_priority_partition_preempts_by_requeue(slurm_cluster: SlurmCluster,
                                                       tmp_path: Path) -> None:
    whole = ("-N", "2", "--ntasks-per-node=1", "--cpus-per-task=2")
    low_script = write_script(tmp_path / "low.sh",
                              'echo "run ${SLURM_RESTART_COUNT:-0}"\nsleep 300\n')
    low = slurm_cluster.sbatch("-p", "debug", *whole, "--open-mode=append", "-o", "low.txt",
                               str(low_script), cwd=tmp_path)
    try:
        wait_for_text(tmp_path / "low.txt", "run 0")
        high = slurm_cluster.sbatch("-p", "urgent", *whole, "-o", "high.txt", "--wrap", "sleep 1",
                                    cwd=tmp_path)
        assert slurm_cluster.wait_done(high) == "COMPLETED"
        wait_for_text(tmp_path / "low.txt", "run 1", timeout=60)
        runs = slurm_cluster.sacct(low, "JobID", "State", duplicates=True)
        assert [r["State"] for r in runs if r["JobID"] == low][0] == "PREEMPTED"
    finally:
        slurm_cluster.run("scancel", low, check=False)


def test_signal_before_the_time_limit(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """``--signal=B:USR2@50`` reaches the batch shell, ``--signal=USR2@50`` the step's tasks,
    10 to 40 s into a 1-minute job (slurmctld checks time limits every 30 s)."""
    trap = write_script(tmp_path / "trap.sh", 'start=$SECONDS\n'
                        'trap \'echo "USR2 after $((SECONDS - start))s"; exit 0\' USR2\n'
                        'while true; do sleep 1; done\n')
    batch = slurm_cluster.sbatch("--time=1", "--signal=B:USR2@50", "-o", "batch.txt", str(trap),
                                 cwd=tmp_path)
    step = slurm_cluster.sbatch("--time=1", "--signal=USR2@50", "-o", "step.txt",
                                "--wrap", f"srun bash {trap}", cwd=tmp_path)
    for job, out in ((batch, "batch.txt"), (step, "step.txt")):
        assert slurm_cluster.wait_done(job,
                                       timeout=120) == "COMPLETED", ((tmp_path / out).read_text())
        assert "USR2 after" in (tmp_path / out).read_text()


def test_submitit_gets_results_from_both_nodes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    submitit = pytest.importorskip("submitit")

    def identity() -> tuple[int, str, str]:  # local, so cloudpickle ships it by value
        import os
        import socket

        return int(os.environ["SLURM_PROCID"]), os.environ["SLURMD_NODENAME"], socket.gethostname()

    executor = submitit.SlurmExecutor(folder=tmp_path / "submitit" / "%j")
    executor.update_parameters(partition="debug", nodes=2, ntasks_per_node=1, time=5)
    job = executor.submit(identity)
    host = socket.gethostname()
    assert sorted(job.results()) == [(0, "node1", host), (1, "node2", host)]
