"""Ranks that train apart: a training loop with no process group, started as 2 ranks by torchrun,
trains two models that save over each other, and nothing fails. `status` names it, once, with
what to change. Real torchrun, 2 CPU ranks."""

from __future__ import annotations

from cli_harness import why
from verdict_scenarios import fixture_job, submit


def test_two_ranks_stepping_with_no_process_group_are_named_as_training_apart(cli, tmp_path):
    job = fixture_job(tmp_path, "no_distributed_train.py",
                      "name: plain\nscript: train.py\nlauncher: torchrun\nprocs_per_node: 2\n")
    status = submit(cli, job)
    assert status["state"] == "SUCCEEDED", why(status)  # a notice, never a failure
    [apart] = [e for e in status["events"] if e["kind"] == "ranks_apart"]
    assert apart["message"].startswith("rank(s) 0, 1 take optimizer steps with no "
                                       "torch.distributed process group"), apart
    assert "the job starts 2 ranks" in apart["message"] and "run 1 rank" in apart["message"]
