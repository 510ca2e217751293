"""The restart budget and the backoff over many faults, with the defaults a user never changes: real
torchrun, 2 CPU ranks (gloo), faults injected into the demo through FSDP_ORCH_FAULT.

The budget counts failures without progress, not failures: a job that completes a new checkpoint
between faults keeps going (before, the fourth fault ended it, "restart budget exhausted"), and
the backoff grows only over failures in a row without progress."""

from __future__ import annotations

import json

import pytest
from cli_harness import demo_args, job_events

pytestmark = pytest.mark.slow

# Only what the test size needs: the restart settings are the demo's, which are the defaults
# (backoff 1 s plus up to 1 s of jitter; no cap; 3 failures in a row without progress).
COMMON = ["--set", "checkpoint.interval=10", "--set", "watch.heartbeat_timeout=8s",
          "--set", "watch.startup_timeout=90s"]
INITIAL, JITTER = 1.0, 1.0


def submit(cli, demo, steps: int, faults: list[str]) -> tuple[dict, str]:
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(demo), *COMMON,
                   "--set", demo_args(steps), "--set", "env.FSDP_ORCH_FAULT=" + ";".join(faults))
    status = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return status, proc.stderr


def test_faults_between_new_checkpoints_never_exhaust_the_budget_and_the_backoff_resets(cli,
                                                                                        demo):
    # attempt 0 saves 10 then crashes; 1 and 2 fail before saving 20 (no progress: the backoff
    # grows); 3 saves 20 then hangs (progress: the backoff is back to its first step)
    faults = ["crash:step=12:rank=1:attempt=0", "kill:step=15:rank=0:attempt=1",
              "crash:step=15:rank=1:attempt=2", "hang:step=25:rank=1:attempt=3"]
    status, stderr = submit(cli, demo, 40, faults)
    assert status.get("state") == "SUCCEEDED", (status, stderr)
    assert status["attempts"] == 5 and status["last_checkpoint_step"] == 40
    assert [(f["attempt"], f["action"], f["progressed"]) for f in status["failures"]] == [
        (0, "restart", True), (1, "restart", False), (2, "restart", False),
        (3, "restart", True)]
    assert status["restart_budget"] == {"restarts": 4, "max_restarts": None,
                                        "failures_without_progress": 0, "crash_loop_attempts": 3}
    events = job_events(cli, status["id"])
    delays = [e["delay"] for e in events if e["kind"] == "restart_scheduled"]
    steps = [1, 1, 2, 1]  # 1 after progress; then one more per failure in a row without it
    assert len(delays) == 4, delays
    for delay, step in zip(delays, steps, strict=True):
        base = INITIAL * 2 ** (step - 1)
        assert base <= delay <= base + JITTER, (delays, steps)
    reasons = [e["reason"] for e in events if e["kind"] == "restart_scheduled"]
    assert reasons[2] == ("restart 3 after injected_fault (2 of 3 failures in a row without "
                          "progress)")
    assert reasons[3] == "restart 4 after hang (after progress)"
    # status says the budget in its new terms (the --wait line is the same text: test_follow.py)
    shown = cli.run("status", status["id"], check=True).stdout
    assert "restarts: restart 4; without progress 0 of 3" in shown, shown


def test_a_crash_loop_without_progress_is_stopped_and_named(cli, demo):
    """Attempt 0 saves step 10, then every attempt fails before saving step 20: the third failure
    in a row without a new checkpoint stops the job, and the reason says where it was stuck."""
    faults = [f"crash:step=12:rank=1:attempt={a}" for a in range(4)]
    status, stderr = submit(cli, demo, 30, faults)
    assert status.get("state") == "FAILED", (status, stderr)
    assert status["attempts"] == 4
    assert [f["progressed"] for f in status["failures"]] == [True, False, False, False]
    assert status["reason"].endswith(
        "crash loop: 3 attempts in a row made no progress past checkpoint step 10 "
        "(restart.crash_loop_attempts=3)"), status
    assert status["failures"][-1]["action"] == "give_up"
    assert status["restart_budget"]["failures_without_progress"] == 3
