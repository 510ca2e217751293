"""A fresh submission does not silently continue a finished job (issue 25): resubmitting a job whose
checkpoint folder holds the checkpoint of a job that ended SUCCEEDED is refused (exit 2, both flags
named, nothing recorded); ``--resume`` continues it and says from where and whose; ``--fresh`` keeps
the old checkpoints moved aside and trains from step 0. Real torchrun, the demo on 2 CPU ranks."""

from __future__ import annotations

import json

import pytest

from fsdp_orch.checkpoints.aside import PREVIOUS_DIR
from fsdp_orch.checkpoints.layouts.dcp import step_dir_name as step
from tests.cli_harness import copy_demo, make_cli

pytestmark = pytest.mark.slow

SETTINGS = ["--set", "args=[--steps, 10, --seq-len, 32, --layers, 2]", "--set",
            "checkpoint.interval=5", "--set", "checkpoint.keep_last=5"]


def test_a_resubmission_after_success_is_refused_then_resumed_or_started_fresh(tmp_path):
    cli, job = make_cli(tmp_path), copy_demo(tmp_path)
    ckpt = job.parent / "checkpoints" / "demo"
    proc = cli.run("submit", "--cluster", "local", str(job), "--wait", "--json", *SETTINGS)
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)
    assert first["state"] == "SUCCEEDED" and first["last_checkpoint_step"] == 10

    refused = cli.run("submit", "--cluster", "local", str(job), *SETTINGS)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    for fragment in ("--resume", "--fresh", first["id"], "SUCCEEDED", str(ckpt / step(10))):
        assert fragment in refused.stderr, refused.stderr
    listed = json.loads(cli.run("status", "--json", check=True).stdout)
    assert [j["id"] for j in listed] == [first["id"]]  # nothing recorded

    proc = cli.run("submit", "--cluster", "local", str(job), "--wait", "--json", "--resume",
                   *SETTINGS)
    assert proc.returncode == 0, proc.stderr
    resumed = json.loads(proc.stdout)
    assert f"resuming from {ckpt / step(10)} (step 10, written by job {first['id']}" in proc.stderr
    logs = cli.run("logs", resumed["id"], check=True).stdout
    # it went on from step 10: no step of the first job was trained again
    assert "step=1 " not in logs

    proc = cli.run("submit", "--cluster", "local", str(job), "--wait", "--json", "--fresh",
                   *SETTINGS)
    assert proc.returncode == 0, proc.stderr
    fresh = json.loads(proc.stdout)
    assert f"moved the checkpoints aside to {ckpt / PREVIOUS_DIR}" in proc.stderr, proc.stderr
    assert "step=1 " in cli.run("logs", fresh["id"], check=True).stdout  # from the start
    kept = sorted(p.name for p in (ckpt / PREVIOUS_DIR).iterdir())
    assert kept == [f"{step(5)}.{fresh['id']}", f"{step(10)}.{fresh['id']}"]
    assert sorted(p.name for p in ckpt.glob("step-*")) == [step(5), step(10)]  # the fresh job's own
    # status --json lists its notices as "events"
    notices = {n["kind"] for n in cli.status(fresh["id"])["events"]}
    assert "submit_fresh" in notices
