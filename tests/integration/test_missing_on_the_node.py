"""What a job needs on a node (its working folder, script and python) is checked by the node's
launch script before anything starts: missing, it is said by name, as node_setup_error, and not
retried (issue 42: a missing script used up every restart and ended ``unknown``). Submit checks the
same on the local kind; here the script goes away between two attempts, as it can on any node."""

from __future__ import annotations

from pathlib import Path

from cli_harness import Cli, demo_args, why


def test_a_script_gone_before_the_next_attempt_is_named_and_not_retried(cli: Cli,
                                                                         demo: Path) -> None:
    job_id = cli.run("submit", "--cluster", "local", str(demo), "--set", demo_args(30),
                     "--set", "env.FSDP_ORCH_FAULT=crash:step=3:rank=0",
                     "--set", "restart.backoff.initial=5s", "--set", "restart.backoff.jitter=0",
                     check=True).stdout.strip()
    cli.wait_until(job_id, lambda s: bool(s["failures"]), timeout=180, what="the first crash")
    (demo.parent / "train.py").unlink()  # during the 5 s backoff
    final = cli.wait_until(job_id, lambda s: s["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"),
                           timeout=180, what="the end")
    assert final["state"] == "FAILED" and final["attempts"] == 2, why(final)
    crash, missing = final["failures"]
    assert crash["category"] == "injected_fault", crash
    assert missing["category"] == "node_setup_error", missing
    assert missing["action"] != "restart", missing  # not retried: it would be missing again
    assert f"the script train.py is not in {demo.parent}" in missing["evidence"], missing
