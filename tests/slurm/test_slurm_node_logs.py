"""Rank logs stay on the node (issue 45, item 5), on the real SLURM test cluster: during steady
training of a 2-node job the shared run folder sees at most 3 file changes a second (polled: new
files, or a changed mtime or size; torchrun appending every rank's line there made about 16 a
second, measured by hand before the change), ``logs`` and ``logs --rank`` read the ranks' lines
during the job (each rank's own, on the node the rendezvous put it), and once it ended the run
folder holds the whole of each node's logs. The demo at test size, 0.1 s a step: rank 0 prints a
line a step, as often as the full-size demo at full speed, for a fraction of its CPU.

The job is ended by ``fsdp-orch cancel``, and the same test checks what cancel does: the job ends
CANCELLED in sacct and in status with no job step left (it was a test of its own in
test_slurm_backend.py that started a job of the same kind for it alone: 44 s of a loaded CI run)."""

from __future__ import annotations

import pytest
from cli_harness import UNTIL_STOPPED, demo_args
from logs_on_node import node_logs_not_copied, steady_training_checked
from test_slurm_backend import slurm_id

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_a_two_node_job_changes_the_shared_run_folder_at_most_3_times_a_second_and_cancel_ends_it(
        slurm_cluster, cli, demo) -> None:
    job_id = cli.run("submit", "--cluster", "slurm", str(demo), "--set", "nodes=2",
                     "--set", "procs_per_node=1", "--set", demo_args(*UNTIL_STOPPED),
                     check=True).stdout.strip()
    run_dir = cancelled = None
    try:
        run_dir = steady_training_checked(cli, job_id)
        cancelled = cli.run("cancel", job_id, check=True)
    finally:
        if cancelled is None:
            cli.run("cancel", job_id)
    assert run_dir is not None and cancelled is not None
    # cancel: the job ends in sacct and in status, and no job step is left
    assert "cancelled" in cancelled.stdout, cancelled.stdout
    sid = slurm_id(cli, job_id)
    assert slurm_cluster.wait_done(sid, timeout=60) == "CANCELLED"
    assert cli.status(job_id)["state"] == "CANCELLED"
    steps = slurm_cluster.run("squeue", "-h", "-s", "-j", sid, check=False).stdout.strip()
    assert steps == "", steps
    assert node_logs_not_copied(run_dir / "attempt-0", job_id, (0, 1)) == []
