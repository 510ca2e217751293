"""``status`` tells the truth about steps and losses of a script that resumes itself (issue 67, part
4): examples/unchanged/fabric, a Lightning Fabric loop as Fabric's docs write it (``fabric.save``
every 25 steps, its own resume, no ``checkpoint:`` block), real torchrun, 2 CPU ranks.

- killed mid-run (rank 1 at step 110): the restart resumes from the script's own save; ``status``
  ends at the step and loss its last ``step N loss L`` line shows, and every recorded loss goes
  with the step its line printed it at (never the previous attempt's);
- submitted again with ``--fresh``: nothing to move is said, with where it looked, and the attempt
  that trained no step is said."""

from __future__ import annotations

import json
import re

import pytest
from cli_harness import attempt_log, job_events, why

pytestmark = pytest.mark.slow

STEPS = 200
FAST = ["--set", "watch.startup_timeout=10s", "--set", "restart.backoff.initial=1s",
        "--set", "restart.backoff.jitter=0",
        "--set", f'args=["--steps", "{STEPS}", "--save-every", "25", "--sleep-per-step", "0.01"]']
LINE = re.compile(r"^(?:\[default0\]:)?step (\d+) loss ([\d.]+)\s*$", re.MULTILINE)


def submit(cli, job, *extra: str) -> dict:  # type: ignore[no-untyped-def]
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(job), *FAST, *extra,
                   timeout=240)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def printed(run_dir: str, attempt: int) -> dict[int, float]:
    """Step -> loss as rank 0 printed them in the attempt."""
    console = attempt_log(run_dir, attempt, "console-node-0.log")
    return {int(s): float(v) for s, v in LINE.findall(console)}


@pytest.fixture(scope="module")
def killed(module_unchanged):
    cli, job = module_unchanged("fabric")
    return cli, job, submit(cli, job, "--set", "env.FSDP_ORCH_FAULT=kill:step=110:rank=1")


def test_a_kill_mid_run_ends_at_the_step_and_loss_the_script_printed(killed):
    cli, job, status = killed
    assert status["state"] == "SUCCEEDED" and status["attempts"] == 2, why(status)
    last = printed(status["run_dir"], 1)
    assert min(last) == 101 and max(last) == STEPS, sorted(last)[:3]  # resumed itself from 100
    progress = status["progress"]
    assert (progress["step"], progress["loss_step"]) == (STEPS, STEPS), progress
    assert progress["loss"] == last[STEPS], (progress, last[STEPS])
    # every loss recorded in attempt 1 is one it printed, at the step it printed it
    events = job_events(cli, status["id"])
    started = next(i for i, e in enumerate(events)
                   if e["kind"] == "attempt_started" and e["attempt"] == 1)
    for event in events[started:]:
        if event["kind"] == "progress" and event.get("loss") is not None:
            assert last.get(event["loss_step"]) == event["loss"], (event, status["id"])


def test_fresh_with_nothing_to_move_and_an_attempt_that_trains_nothing_are_said(killed):
    cli, job, _ = killed
    status = submit(cli, job, "--fresh")
    assert status["state"] == "SUCCEEDED", why(status)
    notices = {e["kind"]: e["message"] for e in status["events"]}
    assert "--fresh found no checkpoint to move: looked in " in notices["submit_fresh"], notices
    assert "is not reset" in notices["submit_fresh"]
    assert "attempt 0 trained no step" in notices["no_steps_trained"], notices
    assert status["progress"] is None, status["progress"]  # not "step 0"
