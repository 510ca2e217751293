"""The supervisor against real failures: torchrun with 2 CPU ranks (gloo), faults injected into the
demo job through FSDP_ORCH_FAULT. Every fault is classified and restarted from a checkpoint (several
faults in one job, one an attempt, where only the job's settings tell them apart), the job ends
SUCCEEDED, and the final loss equals, bit for bit, an uninterrupted run's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_harness import culprit_leads, demo_args, hang_windows, job_events, standby_starts

from fsdp_orch.observe.proctree import job_processes

pytestmark = pytest.mark.slow

STEPS = 30
COMMON = [
    "--set", demo_args(STEPS),
    "--set", "checkpoint.interval=5",
    "--set", "restart.backoff.initial=0.5s",
    "--set", "restart.backoff.jitter=0",
    "--set", "watch.heartbeat_timeout=8s",
    "--set", "watch.startup_timeout=90s",
]


@pytest.fixture(scope="module")
def reference(module_cli_and_demo):
    """The final loss and parameters of an uninterrupted run of the same job."""
    cli, demo = module_cli_and_demo
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(demo), *COMMON)
    assert proc.returncode == 0, proc.stderr
    job_id = json.loads(proc.stdout)["id"]
    return json.loads((cli.home / "runs" / job_id / "result.json").read_text())


def run_with_fault(cli, demo, fault: str, *extra: str) -> tuple[dict, dict]:
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(demo), *COMMON,
                   "--set", f"env.FSDP_ORCH_FAULT={fault}", *extra)
    status = json.loads(proc.stdout) if proc.stdout.strip() else {}
    assert proc.returncode == 0, (status, proc.stderr)
    for failure in status["failures"]:  # --wait said each one as it came, with its evidence
        said = f"attempt {failure['attempt']} failed: {failure['category']} -> {failure['action']}"
        culprit = (failure["evidence"] or "").partition("; ")[0]
        assert said in proc.stderr and culprit in proc.stderr, proc.stderr
    result = json.loads((cli.home / "runs" / status["id"] / "result.json").read_text())
    return status, result


def assert_restarted(failure: dict, attempt: int, category: str, evidence: str) -> None:
    assert failure["attempt"] == attempt, failure
    assert failure["category"] == category, failure
    assert evidence in (failure["evidence"] or ""), failure
    assert failure["action"] == "restart", failure


def attempts_resumed_from(cli, job_id: str) -> list[int | None]:
    return [e.get("resume_step") for e in job_events(cli, job_id)
            if e["kind"] == "attempt_started"]


# One job, one fault an attempt (each fault's ``attempt=``; the last attempt runs clean): each is
# classified and restarted from the last complete checkpoint before it, and the result is still
# bit-exact (one job where there were three: the fault, not the job, is what each part checks).
# Attempt 0 dies of SIGKILL at step 12 (checkpoints 5, 10), attempt 1 hangs at step 17 (after 15's
# save), attempt 2 dies inside the save of step 20 (leaving it partial), attempt 3 ends at 30.
CHAIN = ("kill:step=12:rank=1;hang:step=17:rank=1:attempt=1;"
         "checkpoint_crash:step=20:rank=1:attempt=2")


def test_kill_hang_and_a_crash_in_a_save_are_classified_restarted_and_the_result_is_exact(
        cli, demo, reference):
    status, result = run_with_fault(cli, demo, CHAIN)
    assert status["state"] == "SUCCEEDED"
    assert status["attempts"] == 4 and status["restarts"] == 3
    kill, hang, in_save = status["failures"]
    assert_restarted(kill, 0, "injected_fault", "injected SIGKILL")
    assert_restarted(hang, 1, "hang", "no progress")
    assert_restarted(in_save, 2, "injected_fault", "injected crash inside the checkpoint save")
    # the hang judged under the window in force: the default follows the step time, 8 s its ceiling
    window = hang_windows(cli, status["id"], attempt=1)[-1]["window_s"]
    assert 2 <= window <= 8 and window <= hang["stalled_for_s"] < window + 5, (window, hang)
    assert culprit_leads(hang["evidence"], 1), hang["evidence"]
    # each restart resumed from the last complete checkpoint before its fault (the partial save
    # of step 20 skipped)
    assert attempts_resumed_from(cli, status["id"]) == [None, 10, 15, 15]
    assert result["resumed_from"] == 15
    assert result["final_loss"] == reference["final_loss"]
    assert result["param_sha256"] == reference["param_sha256"]


def test_crash_is_classified_restarted_and_the_result_is_exact(cli, demo, reference):
    # the crash's attempt prepares no keeper for the next one before it has run 5 minutes
    status, result = run_with_fault(cli, demo, "crash:step=12:rank=1",
                                    "--set", "launch.prepare_standby_after=5m")
    assert status["state"] == "SUCCEEDED"
    assert status["attempts"] == 2 and status["restarts"] == 1
    [failure] = status["failures"]
    assert_restarted(failure, 0, "injected_fault", "injected crash at step 12")
    assert result["resumed_from"] >= 5, "the restart did not resume from a checkpoint"
    assert result["final_loss"] == reference["final_loss"]
    assert result["param_sha256"] == reference["param_sha256"]
    started = standby_starts(cli.home / "runs" / status["id"] / "attempt-1")
    assert started == ["started at once (none was prepared)"], started


def test_collective_timeout_is_a_gloo_timeout(cli, demo, reference):
    status, result = run_with_fault(cli, demo, "collective_timeout:step=12:rank=1",
                                    "--set", "watch.collective_timeout=4s",
                                    "--set", "watch.heartbeat_timeout=60s",
                                    "--set", "watch.hang_detection=fixed")  # gloo's 4 s comes first
    [failure] = status["failures"]
    assert failure["category"] == "gloo_timeout_or_peer_lost", failure
    assert status["state"] == "SUCCEEDED"
    assert result["final_loss"] == reference["final_loss"]


def test_user_code_error_fails_after_one_attempt(cli, tmp_path, demo):
    script = demo.parent / "train.py"
    text = script.read_text()
    marker = "    for step in range(start + 1, args.steps + 1):\n"
    assert marker in text
    script.write_text(text.replace(marker, marker + "        if step == 3 and job.rank == 1:\n"
                                                    "            raise KeyError('tokens')\n"))
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(demo), *COMMON)
    assert proc.returncode == 1
    status = json.loads(proc.stdout)
    assert status["state"] == "FAILED" and status["attempts"] == 1
    [failure] = status["failures"]
    assert failure["category"] == "user_code_error"
    assert failure["evidence"].startswith("KeyError: 'tokens' (at train.py:"), failure["evidence"]
    assert failure["action"] == "give_up"
    assert "user_code_error" in status["reason"]
    # ended, the job leaves nothing running: not the keeper its attempt prepared for a next one,
    # which waited 120 s (standby.ranks.UNCLAIMED_S) holding torch's memory
    assert job_processes(status["id"]) == [], [
        Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
        for pid in job_processes(status["id"])]
