"""A Hugging Face Trainer script that never imports fsdp_orch (examples/unchanged/hf_trainer), under
fsdp-orch with real torchrun, 2 CPU ranks (DDP over gloo), a GPT-2 built from a config and synthetic
tokens. Nothing is fetched from a hub. Acceptance of "any training script, unchanged"."""

from __future__ import annotations

import json
import math
import shutil
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from cli_harness import culprit_leads, hang_windows

pytestmark = pytest.mark.slow

STARTUP_TIMEOUT = 6.0
HEARTBEAT_TIMEOUT = 6.0
FAST = ["--set", f"watch.startup_timeout={STARTUP_TIMEOUT:g}s",
        "--set", f"watch.heartbeat_timeout={HEARTBEAT_TIMEOUT:g}s",
        "--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0"]


def args_with(job: Path, **changes: str) -> list[str]:
    """The example's args with some values replaced (``max_steps="60"``), as a --set."""
    import yaml

    args = [str(a) for a in yaml.safe_load(job.read_text())["args"]]
    for key, value in changes.items():
        flag = f"--{key}"
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return ["--set", "args=" + json.dumps(args)]


def submit(cli, job: Path, *extra: str) -> dict:  # type: ignore[no-untyped-def]
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(job), *FAST, *extra)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def submit_watching(cli, job: Path,  # type: ignore[no-untyped-def]
                    *extra: str) -> tuple[dict, list[dict]]:
    """As ``submit``, while ``status --json`` is polled until the job's first failure: its final
    status and every status seen before that failure."""
    final: dict = {}
    run = threading.Thread(target=lambda: final.update(submit(cli, job, *extra)))
    run.start()
    seen: list[dict] = []
    while run.is_alive():
        listed = json.loads(cli.run("status", "--json").stdout or "[]")
        if listed and listed[-1]["failures"]:
            break
        seen += listed
        time.sleep(0.3)
    run.join()
    return final, seen


def seconds(status: dict) -> float:
    parse = datetime.fromisoformat
    return (parse(status["ended_at"].replace("Z", "+00:00"))
            - parse(status["created_at"].replace("Z", "+00:00"))).total_seconds()


def attempt_logs(cli, job_id: str, attempt: int) -> str:  # type: ignore[no-untyped-def]
    return cli.run("logs", job_id, "--attempt", str(attempt), check=True).stdout


@pytest.fixture(scope="module")
def healthy(module_unchanged):
    """A healthy run more than three times longer than startup_timeout."""
    cli, job = module_unchanged("hf_trainer")
    return cli, job, submit(cli, job, *args_with(job, max_steps="300"))


def test_a_healthy_unmodified_trainer_run_longer_than_startup_timeout_succeeds(healthy):
    _, job, status = healthy
    assert status["state"] == "SUCCEEDED", status
    assert status["failures"] == [] and status["attempts"] == 1
    assert seconds(status) > 3 * STARTUP_TIMEOUT, "the run must outlast startup_timeout three times"
    assert status["progress"]["step"] == 300  # optimizer steps, counted with no code change
    # the loss, read from the Trainer's {'loss': ...} lines on rank 0's console
    assert (math.isfinite(status["progress"]["loss"])
            and status["progress"]["loss_source"] == "hf_trainer")
    assert status["hang_detection"] == {"enabled": True, "reason": None}
    assert json.loads((job.parent / "out" / "trainer_state.json").read_text())["global_step"] == 300


def test_a_hang_is_detected_with_the_stuck_frame_and_the_trainer_resumes_from_its_checkpoint(
        unchanged):
    cli, job = unchanged("hf_trainer")
    # the hang comes after step 40's save; the restart resumes there and trains the last 20 (the
    # same shape at 100 steps, saves every 40 and a hang at 90 took 40 steps more)
    status, seen = submit_watching(cli, job, *args_with(job, max_steps="60", save_steps="20"),
                                   "--set", "env.FSDP_ORCH_FAULT=hang:step=50:rank=1")
    assert status["state"] == "SUCCEEDED", status
    [failure] = status["failures"]
    assert failure["category"] == "hang" and failure["action"] == "restart"
    assert failure["stalled_for_s"] <= HEARTBEAT_TIMEOUT + 2, failure
    # while it hung, before the verdict, status said so, with the window in force
    stalled = [s for s in seen if s["stalled_for_s"]]
    assert stalled, [(s["state"], s["progress"], s["stalled_for_s"]) for s in seen[-5:]]
    assert stalled[-1]["state"] == "RUNNING"
    # the window in force is the default one, following the Trainer's steps below the ceiling, as
    # recorded
    recorded = [w["window_s"] for w in hang_windows(cli, status["id"]) if w["mode"] == "adaptive"]
    assert (stalled[-1]["hang_window_s"] in recorded
            and stalled[-1]["hang_window_s"] < HEARTBEAT_TIMEOUT), recorded
    evidence = failure["evidence"]
    assert "rank 1 stuck at train.py:" in evidence, evidence  # the stuck rank's frame of user code
    assert culprit_leads(evidence, 1), evidence  # not rank 0, waiting in the Trainer's collective
    stacks = Path(evidence.rsplit("stacks: ", 1)[1])
    assert "train.py" in (stacks / "rank-1.txt").read_text()
    assert str(stacks) in cli.run("logs", status["id"], "--attempt", "0", check=True).stdout
    launch = (Path(status["run_dir"]) / "attempt-1" / "launch.sh").read_text()
    checkpoint = job.parent / "out" / "checkpoint-40"
    assert f"--resume_from_checkpoint {checkpoint}" in launch
    assert "global step 40" in attempt_logs(cli, status["id"], 1)  # the Trainer went on from M
    assert json.loads((job.parent / "out" / "trainer_state.json").read_text())["global_step"] == 60
    assert status["progress"]["step"] == 60  # the resumed attempt counts on from the checkpoint


def test_a_partial_checkpoint_newer_than_the_latest_complete_is_moved_aside_not_passed(healthy):
    cli, job, _ = healthy
    out = job.parent / "out"
    partial = out / "checkpoint-500"
    shutil.copytree(out / "checkpoint-300", partial)
    (partial / "trainer_state.json").unlink()  # the save died before the Trainer's last file
    # the healthy run ended SUCCEEDED: going on from its checkpoint is asked for (--resume), for
    # 5 steps more (what is asserted is where it resumed from; 20 trained 15 more for nothing)
    status = submit(cli, job, "--resume", *args_with(job, max_steps="305"))
    assert status["state"] == "SUCCEEDED", status
    launch = (Path(status["run_dir"]) / "attempt-0" / "launch.sh").read_text()
    assert f"--resume_from_checkpoint {out / 'checkpoint-300'}" in launch
    assert "checkpoint-500" not in launch
    assert not partial.exists()
    aside = out / ".fsdp-orch-incomplete" / "checkpoint-500.attempt-0"
    assert (aside / "config.json").exists()  # moved, never deleted
    [event] = [e for e in status["events"] if e["kind"] == "checkpoint_moved_aside"]
    assert "checkpoint-500" in event["message"] and str(aside) in event["message"]
    assert "global step 300" in attempt_logs(cli, status["id"], 0)
