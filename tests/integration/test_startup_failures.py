"""A job that fails before its first step because of the user's own mistake (issue 62): a typo in
the script's arguments, a module that is not installed, a data file that is not there, a helper
that may not be run. Each is ``user_code_error`` at its first attempt, not retried (it would fail
the same way), and the line that says what is wrong (argparse's ``error:`` line, the exception) is
what ``submit --wait`` and ``status JOB_ID`` show. Real torchrun, 2 ranks, on the local kind; the
script is the test's own (no torch), so each job ends in seconds."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from cli_harness import Cli, why

pytestmark = pytest.mark.slow

SCRIPT = '''\
import argparse
import subprocess

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--mode", default="ok")
parser.add_argument("--path", default="")
args = parser.parse_args()
if args.mode == "import":
    import fsdp_orch_test_no_such_module  # noqa: F401
if args.mode == "data":
    with open(args.path) as f:
        f.read()
if args.mode == "exec":
    subprocess.run([args.path], check=True)
print("done", args.steps)
'''

JOB = '''\
name: startup
script: startup.py
launcher: torchrun
nodes: 1
procs_per_node: 2
env:
  OMP_NUM_THREADS: "1"
restart:
  backoff: {initial: 1s, max: 2s, jitter: 0s}
watch:
  startup_timeout: 60s
'''


@pytest.fixture
def job(tmp_path: Path) -> Path:
    folder = tmp_path / "startup"
    folder.mkdir()
    (folder / "startup.py").write_text(SCRIPT)
    (folder / "job.yaml").write_text(JOB)
    return folder / "job.yaml"


def submit_and_wait(cli: Cli, job: Path, args: list[str]) -> tuple[str, dict]:
    """``submit --wait`` with ``args`` for the script: its output, and the job's status."""
    proc = cli.run("submit", "--cluster", "local", "--wait", str(job),
                   "--set", "args=" + json.dumps(args), timeout=300)
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    job_id = proc.stdout.split()[0]
    return proc.stdout + proc.stderr, cli.status(job_id)


def the_user_error(cli: Cli, output: str, status: dict, line: str) -> dict:
    """One attempt, failed with user_code_error, given up; ``line`` is in the evidence, in the
    ``--wait`` output and in ``status JOB_ID``."""
    assert status["state"] == "FAILED" and status["attempts"] == 1, why(status)
    [failure] = status["failures"]
    assert failure["category"] == "user_code_error", failure
    assert failure["action"] == "give_up", failure
    assert line in failure["evidence"], failure
    assert line in output, output
    table = cli.run("status", status["id"], check=True).stdout
    assert "attempt 0: user_code_error -> give_up" in table, table
    assert line in table, table
    assert failure["hint"] in output and failure["hint"] in table, (failure, output)
    return failure


def test_a_typo_in_the_scripts_arguments_is_argparses_error(cli: Cli, job: Path) -> None:
    output, status = submit_and_wait(cli, job, ["--stpes", "5"])
    line = "startup.py: error: unrecognized arguments: --stpes 5"
    failure = the_user_error(cli, output, status, line)
    assert failure["evidence"] == line, failure
    assert "--set args=" in failure["hint"], failure  # where the arguments come from
    page = cli.cwd / "report.html"
    cli.run("report", status["id"], "--out", str(page), check=True)
    assert html.escape(line) in page.read_text(), "the report page shows argparse's line"


def test_a_module_not_installed_is_named(cli: Cli, job: Path) -> None:
    output, status = submit_and_wait(cli, job, ["--mode", "import"])
    failure = the_user_error(
        cli, output, status, "ModuleNotFoundError: No module named 'fsdp_orch_test_no_such_module'")
    assert "pip install" in failure["hint"] and "node" in failure["hint"], failure


def test_a_missing_data_file_is_named(cli: Cli, job: Path, tmp_path: Path) -> None:
    missing = tmp_path / "data" / "train.bin"
    output, status = submit_and_wait(cli, job, ["--mode", "data", "--path", str(missing)])
    failure = the_user_error(
        cli, output, status, f"FileNotFoundError: [Errno 2] No such file or directory: '{missing}'")
    assert "every node" in failure["hint"] and "workdir" in failure["hint"], failure


def test_a_helper_that_may_not_be_run_is_a_permission_error(cli: Cli, job: Path,
                                                            tmp_path: Path) -> None:
    helper = tmp_path / "prepare.sh"  # not executable: not even root may run it
    helper.write_text("#!/bin/sh\necho prepared\n")
    helper.chmod(0o644)
    output, status = submit_and_wait(cli, job, ["--mode", "exec", "--path", str(helper)])
    failure = the_user_error(cli, output, status,
                             f"PermissionError: [Errno 13] Permission denied: '{helper}'")
    assert "chmod +x" in failure["hint"], failure
