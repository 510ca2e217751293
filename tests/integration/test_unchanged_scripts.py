"""Scripts in the shapes users bring, none importing fsdp_orch (examples/unchanged): the PyTorch
FSDP tutorials' mp.spawn + FSDP1 and torchrun + FSDP2 loops, a rank-0 evaluation loop, an Accelerate
script and a program that is not Python. Real launchers, 2 CPU ranks, gloo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import attempt_log, culprit_leads, iso_epoch, job_events, why

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
HEARTBEAT_S, STARTUP_S = 5, 4
TUTORIALS = {
    # name: (args, the step rank 1 hangs at). One job a tutorial, under a 4 s startup timeout and a
    # 5 s heartbeat timeout: its first attempt steps healthily past both (4.2 s and 7.5 s of
    # sleeps alone, longer under load), across an epoch's end (spawn: 20 batches each) or DCP saves
    # at steps 20 and 40 (torchrun), until rank 1 hangs in the second epoch (spawn) or after step
    # 40's save (torchrun). The restart is the healthy run to the end: spawn starts over (40
    # batches, 6 s of sleeps, across the epoch's end again), torchrun resumes from its own step-40
    # DCP checkpoint (40 steps, 6 s, saves at 60 and 80). These were three jobs more: a healthy run
    # of each, and a crash at step 50 for the resume, which takes the same restart path as the
    # hang's.
    "spawn_fsdp1": (["--epochs", "2", "--batches-per-epoch", "20", "--sleep-per-step", "0.15",
                     *SPAWN_SIZE], 28),
    "torchrun_fsdp2": (["--steps", "80", "--save-every", "20", "--sleep-per-step", "0.15",
                        *TORCHRUN_SIZE], 50),
}


@pytest.fixture(scope="module")
def tutorial_run(module_unchanged):  # type: ignore[no-untyped-def]
    """``tutorial_run(name)``: (cli, job file, final status) of the tutorial's one job, run once
    for the module's tests."""
    done: dict[str, tuple] = {}  # type: ignore[type-arg]

    def run(name: str) -> tuple:  # type: ignore[type-arg]
        if name not in done:
            cli, job = module_unchanged(name)
            args, step = TUTORIALS[name]
            done[name] = (cli, job, submit(cli, job, *watch(HEARTBEAT_S, STARTUP_S),
                                           "--set", "args=" + json.dumps(args),
                                           "--set", f"env.FSDP_ORCH_FAULT=hang:step={step}:rank=1"))
        return done[name]
    return run


@pytest.mark.parametrize("name", sorted(TUTORIALS))
def test_tutorial_shapes_survive_a_healthy_run_past_the_startup_timeout(tutorial_run, name):
    cli, _, status = tutorial_run(name)
    assert status["state"] == "SUCCEEDED", why(status)
    # the injected hang is the only failure: neither attempt was judged for its startup
    assert [f["category"] for f in status["failures"]] == ["hang"], status["failures"]
    assert status["attempts"] == 2
    assert status["progress"]["step"] > 0
    events = job_events(cli, status["id"])
    started = {e["attempt"]: e["at"] for e in events if e["kind"] == "attempt_started"}
    ended = {e["attempt"]: e["at"] for e in events if e["kind"] == "attempt_ended"}
    hang_at = iso_epoch(status["failures"][0]["detected_at"])
    # the first attempt stepped past the startup timeout before its hang; the second, healthy to
    # the end, outlived it
    assert hang_at - started[0] > STARTUP_S, (started, hang_at)
    assert ended[1] - started[1] > STARTUP_S, (started, ended)


@pytest.mark.parametrize("name", sorted(TUTORIALS))
def test_tutorial_shapes_are_hang_detected_with_the_stuck_frame(tutorial_run, name):
    cli, _, status = tutorial_run(name)
    assert status["state"] == "SUCCEEDED", why(status)
    [failure] = status["failures"]
    assert failure["category"] == "hang" and failure["stalled_for_s"] <= HEARTBEAT_S + 2, failure
    evidence = failure["evidence"]
    assert "rank 1 stuck at train.py:" in evidence, evidence
    assert culprit_leads(evidence, 1), evidence
    if name == "torchrun_fsdp2":  # test_hang_verdicts' culprit test with rank 1 hung, in the suite
        assert (evidence.startswith("rank 1 stuck in train.py:")
                and "1 rank waiting in " in evidence), evidence
        assert "rank 1 stuck in train.py:" in cli.run("status", status["id"], check=True).stdout


def test_torchrun_script_resumes_from_its_own_dcp_checkpoint(tutorial_run):
    # the torchrun tutorial's job: rank 1 hung at step 50, after step 40's save
    cli, job, status = tutorial_run("torchrun_fsdp2")
    assert status["state"] == "SUCCEEDED", why(status)
    launch = (Path(status["run_dir"]) / "attempt-1" / "launch.sh").read_text()
    assert f"--resume {job.parent / 'ckpt' / 'step-40'}" in launch
    # once 61 for a 60-step run (the clean-clone CI of 0199332, not reproduced in 15 runs): the
    # attempts, their progress and the ranks' last lines, should it come again
    progress = [e for e in job_events(cli, status["id"])
                if e["kind"] in ("progress", "attempt_started", "failure_detected")]
    assert status["progress"]["step"] == 80, (
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
    # 6 s of work: twice the startup timeout that turned hang detection off
    status = submit(cli, job, *watch(2, 3), "--set", "env.WORK_SECONDS=6")
    assert status["state"] == "SUCCEEDED", why(status)
    assert status["failures"] == []
    assert status["hang_detection"]["enabled"] is False
    assert "startup_timeout (3s)" in status["hang_detection"]["reason"]
    table = cli.run("status", status["id"], check=True).stdout
    assert "hang detection: off" in table


def test_an_unmodified_accelerate_script_reports_step_progress(unchanged):
    cli, job = unchanged("accelerate")
    # at test size (a 512-wide model, batches of 128, as shipped): the steps counted are the point
    status = submit(cli, job, *watch(30, 120), "--set",
                    'args=["--steps", "25", "--dim", "128", "--batch-size", "32"]')
    assert status["state"] == "SUCCEEDED", why(status)
    assert status["progress"]["step"] == 25
