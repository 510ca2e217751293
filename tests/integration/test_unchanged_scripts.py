"""Scripts in the shapes users bring, none importing fsdp_orch (examples/unchanged): the PyTorch
FSDP tutorials' mp.spawn + FSDP1 and torchrun + FSDP2 loops, a rank-0 evaluation loop, an Accelerate
script and a program that is not Python. Real launchers, 2 CPU ranks, gloo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import attempt_log, culprit_leads, job_events, why

pytestmark = pytest.mark.slow

FAST = ["--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0"]


def submit(cli, job: Path, *extra: str) -> dict:  # type: ignore[no-untyped-def]
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(job), *FAST, *extra)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def watch(heartbeat: float, startup: float) -> list[str]:
    return ["--set", f"watch.heartbeat_timeout={heartbeat:g}s", "--set",
            f"watch.startup_timeout={startup:g}s"]


# The tutorials' models, smaller: what these tests watch is the launcher, the steps and the stacks,
# not the arithmetic. At their own sizes (MNIST batches of 64; a 128-wide model) a rank spent 15 s
# and 13 s of CPU on these runs, most of it on this 2-core machine's busiest tests.
SPAWN_SIZE = ["--batch-size", "16"]
TORCHRUN_SIZE = ["--dim", "64", "--batch-size", "8"]
TUTORIALS = {
    # name: (args of a healthy run, args of a run to hang, the step to hang at). The healthy runs
    # step for 9 s and 8 s idle (their sleeps alone, longer under load), past the 4 s startup
    # timeout and over the 5 s heartbeat timeout, across an epoch's end (spawn) or a DCP save at
    # step 50 (torchrun). The hang comes in the second epoch (spawn: 20 batches each, as the
    # restart starts over), after step 40's save (torchrun).
    "spawn_fsdp1": (["--epochs", "2", "--batches-per-epoch", "30", "--sleep-per-step", "0.15",
                     *SPAWN_SIZE],
                    ["--epochs", "2", "--batches-per-epoch", "20", *SPAWN_SIZE], 28),
    "torchrun_fsdp2": (["--steps", "80", "--sleep-per-step", "0.1", *TORCHRUN_SIZE],
                       ["--steps", "80", "--save-every", "20", *TORCHRUN_SIZE], 50),
}


@pytest.mark.parametrize("name", sorted(TUTORIALS))
def test_tutorial_shapes_survive_a_healthy_run_past_the_startup_timeout(unchanged, name):
    cli, job = unchanged(name)
    healthy_args, _, _ = TUTORIALS[name]
    status = submit(cli, job, *watch(5, 4), "--set", "args=" + json.dumps(healthy_args))
    assert status["state"] == "SUCCEEDED", why(status)
    assert status["failures"] == [] and status["attempts"] == 1
    assert status["progress"]["step"] > 0


@pytest.mark.parametrize("name", sorted(TUTORIALS))
def test_tutorial_shapes_are_hang_detected_with_the_stuck_frame(unchanged, name):
    cli, job = unchanged(name)
    _, args, step = TUTORIALS[name]
    status = submit(cli, job, *watch(5, 60), "--set", "args=" + json.dumps(args),
                    "--set", f"env.FSDP_ORCH_FAULT=hang:step={step}:rank=1")
    assert status["state"] == "SUCCEEDED", why(status)
    [failure] = status["failures"]
    assert failure["category"] == "hang" and failure["stalled_for_s"] <= 5 + 2, failure
    assert "rank 1 stuck at train.py:" in failure["evidence"], failure["evidence"]
    assert culprit_leads(failure["evidence"], 1), failure["evidence"]


def test_torchrun_script_resumes_from_its_own_dcp_checkpoint(unchanged):
    cli, job = unchanged("torchrun_fsdp2")
    status = submit(cli, job, *watch(5, 60), "--set",
                    'args=["--steps", "60", "--save-every", "20"]',
                    "--set", "env.FSDP_ORCH_FAULT=crash:step=50:rank=0")
    assert status["state"] == "SUCCEEDED", why(status)
    launch = (Path(status["run_dir"]) / "attempt-1" / "launch.sh").read_text()
    assert f"--resume {job.parent / 'ckpt' / 'step-40'}" in launch
    # once 61 (the clean-clone CI of 0199332, not reproduced in 15 runs): the attempts, their
    # progress and the ranks' last lines, should it come again
    progress = [e for e in job_events(cli, status["id"])
                if e["kind"] in ("progress", "attempt_started", "failure_detected")]
    assert status["progress"]["step"] == 60, (
        why(status), progress, attempt_log(status["run_dir"], 1, "console-node-0.log")[-2000:])


def test_an_evaluation_loop_three_times_the_heartbeat_timeout_is_not_a_hang(unchanged):
    cli, job = unchanged("eval_loop")
    # one evaluation, at step 10 (none at the last step): rank 0 busy in Python for 12 s, three
    # heartbeat timeouts, under an adaptive window learned from quick steps alone. A second one,
    # at step 20 (30 steps before), cost 12 s more of a core and came after one already passed.
    status = submit(cli, job, *watch(4, 60),
                    "--set", 'args=["--steps", "20", "--eval-every", "10", "--eval-seconds", "12"]')
    assert status["state"] == "SUCCEEDED", why(status)
    assert status["failures"] == [] and status["attempts"] == 1
    assert status["progress"]["step"] == 20
    assert "evaluating at step 10 for 12s" in attempt_log(status["run_dir"], 0,
                                                          "console-node-0.log")


def test_a_program_that_is_not_python_runs_past_startup_timeout_with_hang_detection_off(unchanged):
    cli, job = unchanged("not_python")
    status = submit(cli, job, *watch(2, 3), "--set", "env.WORK_SECONDS=10")
    assert status["state"] == "SUCCEEDED", why(status)
    assert status["failures"] == []
    assert status["hang_detection"]["enabled"] is False
    assert "startup_timeout (3s)" in status["hang_detection"]["reason"]
    table = cli.run("status", status["id"], check=True).stdout
    assert "hang detection: off" in table


def test_an_unmodified_accelerate_script_reports_step_progress(unchanged):
    cli, job = unchanged("accelerate")
    status = submit(cli, job, *watch(30, 120), "--set", 'args=["--steps", "25"]')
    assert status["state"] == "SUCCEEDED", why(status)
    assert status["progress"]["step"] == 25
