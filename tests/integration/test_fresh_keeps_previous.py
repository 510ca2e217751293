"""``submit --fresh`` keeps ``checkpoint.keep_previous`` earlier runs (issue 62): at each --fresh
the checkpoints are moved aside as before, and the oldest runs moved aside beyond the setting are
deleted, said on submit's standard error and in the job's events; what fsdp-orch did not move there
is left alone. Real submissions on the local kind; the script is the test's own and trains nothing,
the checkpoints are Hugging Face ``checkpoint-N`` folders put there as a script would."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_harness import Cli

from fsdp_orch.checkpoints.aside import PREVIOUS_DIR

pytestmark = pytest.mark.slow

JOB = '''\
name: fresh
script: noop.py
launcher: torchrun
procs_per_node: 1
checkpoint:
  dir: ckpt
watch:
  expect_ranks: false
'''


def a_checkpoint(folder: Path, step: int) -> None:
    saved = folder / f"checkpoint-{step}"
    saved.mkdir(parents=True)
    (saved / "model.safetensors").write_bytes(b"w" * 1000)
    (saved / "trainer_state.json").write_text("{}")


def fresh(cli: Cli, job: Path, *settings: str) -> tuple[str, str]:
    proc = cli.run("submit", "--cluster", "local", "--fresh", "--wait", str(job), *settings)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.split()[0], proc.stderr


def test_fresh_keeps_the_newest_runs_moved_aside_and_says_what_it_deleted(cli: Cli,
                                                                          tmp_path: Path) -> None:
    folder = tmp_path / "fresh"
    folder.mkdir()
    (folder / "noop.py").write_text("print('nothing to train')\n")
    job = folder / "job.yaml"
    job.write_text(JOB)
    ckpt, previous = folder / "ckpt", folder / "ckpt" / PREVIOUS_DIR
    ids = []
    for run in range(3):
        a_checkpoint(ckpt, 10 + run)
        job_id, said = fresh(cli, job)
        ids.append(job_id)
        if run == 0:
            (previous / "my-notes").mkdir()  # the user's own, in fsdp-orch's folder
    # the default keeps one run: the one just moved aside
    assert sorted(p.name for p in previous.iterdir()) == ["checkpoint-12." + ids[2], "my-notes"]
    deleted = str(previous / f"checkpoint-11.{ids[1]}")
    assert "checkpoint.keep_previous=1" in said and deleted in said, said
    events = cli.status(ids[2])["events"]
    [pruned] = [e for e in events if e["kind"] == "previous_pruned"]
    assert deleted in pruned["message"], pruned
    # a larger setting deletes nothing until more runs than it are kept
    a_checkpoint(ckpt, 13)
    job_id, said = fresh(cli, job, "--set", "checkpoint.keep_previous=2")
    assert "keep_previous" not in said, said
    assert sorted(p.name for p in previous.iterdir()) == [
        "checkpoint-12." + ids[2], "checkpoint-13." + job_id, "my-notes"]
