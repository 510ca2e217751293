"""A PyTorch Lightning script with Lightning's default folders (examples/unchanged/lightning): every
run logs to a new ``lightning_logs/version_N/`` and ``ModelCheckpoint`` saves there, so the folder
of the newest checkpoint moves with every restart. ``checkpoint.dir`` is a glob over them. Two hangs
injected on rank 1 (attempts 0 and 1): each restart resumes the newest ``last.ckpt``, checked by
Lightning's own "Restoring states" line and the step it continues from. 2 CPU ranks, torchrun."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from cli_harness import culprit_leads, why

pytestmark = pytest.mark.slow

ARGS = ["--max-steps", "100", "--every-n-steps", "20"]
HANGS = "hang:step=50:rank=1;hang:step=70:rank=1:attempt=1"


def test_each_restart_resumes_the_newest_last_ckpt_across_version_folders(unchanged):
    cli, job = unchanged("lightning")
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(job),
                   "--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0",
                   "--set", "watch.heartbeat_timeout=6s", "--set", "watch.startup_timeout=120s",
                   "--set", "args=" + json.dumps(ARGS), "--set", f"env.FSDP_ORCH_FAULT={HANGS}")
    assert proc.stdout.strip(), proc.stderr
    status = json.loads(proc.stdout)
    assert status["state"] == "SUCCEEDED", why(status)
    assert [(f["attempt"], f["category"]) for f in status["failures"]] == [(0, "hang"), (1, "hang")]
    for failure in status["failures"]:  # rank 1 hung, rank 0 waited in Lightning's next collective
        assert culprit_leads(failure["evidence"], 1), failure["evidence"]
    logs = job.parent / "lightning_logs"
    expected = {1: (logs / "version_0" / "checkpoints" / "last.ckpt", 40),
                2: (logs / "version_1" / "checkpoints" / "last.ckpt", 60)}
    for attempt, (ckpt, step) in expected.items():
        launch = (Path(status["run_dir"]) / f"attempt-{attempt}" / "launch.sh").read_text()
        assert f"--ckpt-path {ckpt}" in launch and f"FSDP_ORCH_RESUME_STEP={step}" in launch, launch
        out = cli.run("logs", status["id"], "--attempt", str(attempt), check=True).stdout
        assert re.search(rf"Restoring states from the checkpoint path at {re.escape(str(ckpt))}",
                         out), out[-3000:]
    last_run = cli.run("logs", status["id"], "--attempt", "2", check=True).stdout
    assert "training done at step 100" in last_run
    assert sorted(p.name for p in logs.iterdir()) == ["version_0", "version_1", "version_2"]
    assert status["last_checkpoint_step"] == 100
    # the loss, read from Lightning's progress bar on rank 0's console
    assert (math.isfinite(status["progress"]["loss"])
            and status["progress"]["loss_source"] == "lightning")


def test_a_finished_single_process_run_continued_with_resume_succeeds_without_training(unchanged):
    """One rank, no process group (Lightning's single-device strategy): `submit --resume` of a
    job that ended at max_steps resumes its last.ckpt, and Lightning returns at once, with no
    optimizer step. That is a rank with nothing left to train, SUCCEEDED at the same step;
    it was FAILED `no_ranks_started` ("none of the 1 ranks ... started")."""
    cli, job = unchanged("lightning")
    first = ["--max-steps", "20", "--every-n-steps", "20"]
    common = ("--set", "procs_per_node=1", "--set", "args=" + json.dumps(first))
    done = json.loads(cli.run("submit", "--cluster", "local", "--wait", "--json", str(job),
                              *common, check=True).stdout)
    assert done["state"] == "SUCCEEDED" and done["last_checkpoint_step"] == 20, why(done)
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", "--resume", str(job),
                   *common)
    again = json.loads(proc.stdout)
    assert again["state"] == "SUCCEEDED", why(again)
    assert again["attempts"] == 1 and again["failures"] == [], again
    assert again["progress"]["step"] == 20 and again["last_checkpoint_step"] == 20, again
    launch = (Path(again["run_dir"]) / "attempt-0" / "launch.sh").read_text()
    assert "--ckpt-path" in launch and "FSDP_ORCH_RESUME_STEP=20" in launch, launch
    out = cli.run("logs", again["id"], check=True).stdout
    assert "Restoring states from the checkpoint path" in out, out[-3000:]
