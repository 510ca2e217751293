"""`submit --wait [--timeout D]` as a pipeline step reads it: exit 0 when the job succeeded, 1 when
it failed, 3 when the wait itself ran out (the job goes on), 2 for a bad --timeout."""

from __future__ import annotations

import json

import pytest
from cli_harness import UNTIL_STOPPED, demo_args

pytestmark = pytest.mark.slow


def test_a_wait_that_runs_out_exits_3_and_the_job_goes_on(cli, demo):
    proc = cli.run("submit", "--cluster", "local", "--wait", "--timeout", "3s", "--json", str(demo),
                   "--set", demo_args(*UNTIL_STOPPED))
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    status = json.loads(proc.stdout)
    assert status["state"] in ("PENDING", "STARTING", "RUNNING"), status
    assert ("stopped waiting after --timeout 3s" in proc.stderr
            and "goes on" in proc.stderr), (proc.stderr)
    job_id = status["id"]
    try:
        running = cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 2,
                                 timeout=180, what="steps after the wait ended")
        assert running["state"] == "RUNNING", running
    finally:
        cli.run("cancel", job_id, check=True)
    assert cli.status(job_id)["state"] == "CANCELLED"


def test_wait_exits_0_for_a_success_and_1_for_a_failure_within_the_timeout(cli, tmp_path):
    ok = tmp_path / "ok.yaml"
    ok.write_text("name: ok\nlauncher: python\ncommand: [bash, -c, 'echo fine']\n")
    assert (cli.run("submit", "--cluster", "local", "--wait", "--timeout", "5m", str(ok)).returncode
            == 0)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nlauncher: python\ncommand: [bash, -c, 'echo boom >&2; exit 3']\n"
                   "restart: {max_restarts: 0}\n")
    proc = cli.run("submit", "--cluster", "local", "--wait", "--timeout", "5m", "--json", str(bad))
    assert proc.returncode == 1 and json.loads(proc.stdout)["state"] == "FAILED", proc.stdout


@pytest.mark.parametrize(("args", "expected"), [
    (["--wait", "--timeout", "soon"],
     "--timeout: expected a duration like 90s, 10m or 1h; got 'soon'"),
    (["--timeout", "5m"], "--timeout: only with --wait"),
])
def test_a_bad_timeout_is_one_error_and_submits_nothing(cli, demo, args, expected):
    proc = cli.run("submit", "--cluster", "local", *args, str(demo))
    assert (proc.returncode == 2 and expected in proc.stderr
            and "Traceback" not in proc.stderr), (proc.stderr)
    assert not (cli.home / "runs").exists() or not any((cli.home / "runs").iterdir())
