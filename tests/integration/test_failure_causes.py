"""A cause for every ending (issue 26): real jobs of the demo on 2 CPU ranks, submitted through the
CLI, each ended on purpose and given up at once (restart.max_restarts: 0). A rank SIGKILLed from
outside (as the kernel's OOM killer or a scheduler does) is killed_sigkill, an injected crash is
injected_fault, in ``status --json`` and in the status table; neither is ever unknown."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest
from cli_harness import SMALL_DEMO, why

from fsdp_orch.nodeagent.beat_dir import read_node_heartbeats

pytestmark = pytest.mark.slow

ONE_ATTEMPT = ["--set", "restart.max_restarts=0", "--set", "checkpoint.interval=1000",
               "--set", "watch.startup_timeout=60s", "--set", "watch.heartbeat_timeout=30s"]


def args(steps: int) -> list[str]:
    return ["--set", "args=" + json.dumps(["--steps", str(steps), *SMALL_DEMO])]


def ended(cli, job_id: str) -> dict:  # type: ignore[no-untyped-def]
    return cli.wait_until(job_id, lambda s: s["state"] in ("FAILED", "SUCCEEDED", "CANCELLED"),
                          timeout=120, what="the job's end")


def the_failure(cli, status: dict) -> dict:  # type: ignore[no-untyped-def]
    """The job's one failure, checked to be the reason it ended FAILED, and shown in the table."""
    assert status["state"] == "FAILED", why(status)
    [failure] = status["failures"]
    assert failure["category"] != "unknown" and failure["action"] == "give_up", failure
    assert status["reason"].startswith(f"{failure['category']}: "), status["reason"]
    table = cli.run("status", status["id"], check=True).stdout
    assert f"attempt 0: {failure['category']} -> give_up" in table, table
    return failure


def test_a_rank_sigkilled_from_outside_is_killed_sigkill_under_accelerate(cli, demo):
    """The shape of the trial that read unknown: launcher accelerate (its process exits 1 whatever
    ended the rank; torchrun's summary inside says SIGKILL), rank 1 killed mid-training."""
    proc = cli.run("submit", "--cluster", "local", "--json", str(demo), "--set",
                   "launcher=accelerate", *args(5000), *ONE_ATTEMPT, check=True)
    job_id = json.loads(proc.stdout)["id"]
    try:
        running = cli.wait_until(job_id, lambda s: (s["progress"] or {}).get("step", 0) >= 3
                                 or s["state"] not in ("PENDING", "RUNNING"), timeout=90,
                                 what="a few steps")
        beats = read_node_heartbeats(job_id, 0)  # this machine is the node
        assert running["state"] == "RUNNING" and 1 in beats, why(running)
        os.kill(beats[1].pid, signal.SIGKILL)
        failure = the_failure(cli, ended(cli, job_id))
    finally:
        cli.run("cancel", job_id)  # a no-op once it ended; else no job is left training
    assert failure["category"] == "killed_sigkill", failure
    # torchrun names it in two lines, either of which may decide: "failed (exitcode: -9) local_rank:
    # 1 (pid: ...)" as the rank dies, and the summary's "rank : 1 (local_rank: 1)" at exit
    assert re.search(r"\b(?:local_)?rank\s*:?\s*1\b", failure["evidence"]), failure
    assert "SIGKILL" in failure["evidence"], failure
    assert "dmesg" in failure["hint"] and "sacct" in failure["hint"], failure


def test_an_injected_crash_is_injected_fault_not_the_lost_peer_it_causes(cli, demo):
    """The trial's other ending: FSDP_ORCH_FAULT=crash on rank 0, under accelerate too."""
    started = time.monotonic()
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(demo), "--set",
                   "launcher=accelerate",
                   *args(40), *ONE_ATTEMPT, "--set", "env.FSDP_ORCH_FAULT=crash:step=5:rank=0")
    failure = the_failure(cli, json.loads(proc.stdout))
    assert failure["category"] == "injected_fault", failure
    assert failure["evidence"] == (
        "[fsdp-orch fault] rank 0: injected crash at step 5: exiting with code 1")
    assert "FSDP_ORCH_FAULT" in failure["hint"]
    assert time.monotonic() - started < 60
