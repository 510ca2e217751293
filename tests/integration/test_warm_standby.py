"""The warm standby on real processes: the demo crashes once (an injected fault) and resumes. The
second attempt's ranks start from the keeper the first attempt prepared, and ``-X importtime``
(PYTHONPROFILEIMPORTTIME) in the ranks shows no ``import torch`` in their start-up, where the same
job with ``launch.standby: off`` (and no fault) shows it in every rank. Both runs end with the same
parameters.
Without a supervisor: each attempt's keeper forks the next one's from itself, tagged with the next
attempt, which stopping the attempt before spares."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_harness import demo_args

from fsdp_orch.nodeagent.beat_dir import private_beat_dir, user_tmp_root
from fsdp_orch.observe.proctree import job_processes, stop_job_processes
from fsdp_orch.standby.claim import start_keeper
from fsdp_orch.standby.ranks import keeper_socket, standby_folder

pytestmark = pytest.mark.slow

SETTINGS = [
    "--set", demo_args(20),
    "--set", "checkpoint.interval=5",
    "--set", "restart.backoff.initial=0.5s",
    "--set", "restart.backoff.jitter=0",
    "--set", "watch.heartbeat_timeout=30s",
    "--set", "env.FSDP_ORCH_FAULT=crash:step=8:rank=1",
    "--set", "env.PYTHONPROFILEIMPORTTIME=1",
]
# -X importtime's line for the top-level module: "import time:  self |  cumulative | torch".
IMPORTS_TORCH = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| torch$", re.MULTILINE)


def run(cli, demo: Path, *extra: str,  # type: ignore[no-untyped-def]
        attempts: int = 2) -> tuple[dict, Path]:
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(demo), *SETTINGS, *extra)
    status = json.loads(proc.stdout) if proc.stdout.strip() else {}
    assert proc.returncode == 0, (status, proc.stderr)
    assert status["state"] == "SUCCEEDED" and status["attempts"] == attempts, status
    return status, cli.home / "runs" / status["id"]


def rank_stderr(run_dir: Path, attempt: int) -> dict[str, str]:
    """Each rank's stderr as its launcher kept it (torchrun's --log-dir layout, or the
    standby's)."""
    files = sorted((run_dir / f"attempt-{attempt}").glob("node-0/*/attempt_0/*/stderr.log"))
    return {f.parent.name: f.read_text(errors="replace") for f in files}


def test_the_second_attempt_starts_from_the_standby_without_importing_torch(cli, demo):
    # The cold run trains straight through, one attempt (a cold attempt starts its ranks the same
    # way whatever its number; its crash and restart cost a second start for nothing asserted): the
    # demo resumed from a checkpoint ends with the weights, bit for bit, of a run that never stopped
    # (examples/demo/train.py), so the warm run, crashed and resumed, must end with its parameters.
    _, cold_dir = run(cli, demo, "--set", "launch.standby=off", "--set", "env.FSDP_ORCH_FAULT=",
                      attempts=1)
    # its first attempt crashes in its first seconds: the next keeper, forked at once, is ready
    _, warm_dir = run(cli, demo, "--fresh")

    cold = rank_stderr(cold_dir, 0)
    assert sorted(cold) == ["0", "1"]
    assert all(IMPORTS_TORCH.search(text) for text in cold.values()), "a cold rank imports torch"

    console = (warm_dir / "attempt-1" / "console-node-0.log").read_text()
    # (", still importing when claimed" where the machine is busy: the rank waited for that keeper)
    assert ("attempt 1: 2 rank(s) started from the standby (prepared by the attempt before"
            in console)
    warm = rank_stderr(warm_dir, 1)
    assert sorted(warm) == ["0", "1"]
    for rank, text in warm.items():
        assert "import time:" in text, f"rank {rank} did not run with -X importtime"
        assert not IMPORTS_TORCH.search(text), f"rank {rank} imported torch in its start-up"
    # The classifier read the warm launcher's report as it reads torchrun's.
    warm_status = json.loads(cli.run("status", "--json", warm_dir.name).stdout)
    assert [f["category"] for f in warm_status["failures"]] == ["injected_fault"]

    cold_result = json.loads((cold_dir / "result.json").read_text())
    warm_result = json.loads((warm_dir / "result.json").read_text())
    assert warm_result["resumed_from"] == 5 and cold_result["resumed_from"] == 0, (
        warm_result, cold_result)
    assert warm_result["param_sha256"] == cold_result["param_sha256"]
    assert warm_result["final_loss"] == cold_result["final_loss"]


SCHED_IDLE = 5  # linux/sched.h; field 41 ("policy") of /proc/<pid>/task/<tid>/stat


def policies_while_importing(pid: int, socket_path: str, deadline_s: float = 120.0) -> set[int]:
    """The scheduling policies the keeper's threads showed, sampled from /proc until its socket
    appears (its import done). Python 3.11 does not name its threads in /proc, so every thread
    counts."""
    seen: set[int] = set()
    end = time.monotonic() + deadline_s
    while not os.path.exists(socket_path):
        assert time.monotonic() < end, f"keeper {pid} did not finish importing in {deadline_s:g} s"
        for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
            try:
                seen.add(int(stat.read_text().rsplit(")", 1)[1].split()[38]))
            except (OSError, IndexError):
                continue
        time.sleep(0.002)
    return seen


@pytest.mark.parametrize(("waited_on", "policies"),
                         [(True, {os.SCHED_OTHER}), (False, {os.SCHED_OTHER, SCHED_IDLE})])
def test_a_keeper_a_launch_waits_on_imports_at_the_normal_priority_a_next_attempts_at_idle(
        tmp_path: Path, waited_on: bool, policies: set[int]) -> None:
    # Under load (stress-ng at the normal priority) an idle-priority import starved the very first
    # attempt's start that waited on it; only the next attempt's keeper, prepared ahead, may yield.
    folder = standby_folder(user_tmp_root(), f"prio{os.getpid()}x{int(waited_on)}", 0)
    assert private_beat_dir(folder) is None
    path = keeper_socket(folder, 1)
    keeper = start_keeper(path, 1, 2, str(tmp_path / "keeper.log"), waited_on=waited_on)
    try:
        assert policies_while_importing(keeper.pid, path) == policies
    finally:
        keeper.kill()
        keeper.wait()
        shutil.rmtree(os.path.dirname(os.path.dirname(folder)), ignore_errors=True)


# A rank that says whether torch was imported before it ran, the attempt its process is tagged with
# (what stop_job_processes reads) and its keeper's pid, then ends with the status it is given.
RANK = """
import os, sys, time
tags = [e for e in open("/proc/self/environ", "rb").read().split(b"\\0")
        if e.startswith(b"FSDP_ORCH_ATTEMPT=")]
print("torch" in sys.modules, tags[0].decode(), os.getppid(), flush=True)
time.sleep(1)  # the launcher's request for the next keeper comes while the rank runs
sys.exit(int(sys.argv[1]))
"""


def attempt(job_id: str, number: int, code: int, cwd: Path) -> tuple[list[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    env.update(FSDP_ORCH_JOB_ID=job_id, FSDP_ORCH_ATTEMPT=str(number))
    proc = subprocess.run([sys.executable, "-m", "fsdp_orch.standby.launch", "--mode", "plain",
                           "--entry", "script", "--", "rank.py", str(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == code, proc.stderr
    return proc.stdout.split(), proc.stderr


def ended(job_id: str, number: int, within_s: float = 10.0) -> bool:
    end = time.monotonic() + within_s
    while job_processes(job_id, number):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def test_each_keeper_forks_the_next_attempts_which_stopping_its_own_attempt_spares(tmp_path):
    (tmp_path / "rank.py").write_text(RANK)
    job_id = f"chain{os.getpid()}"
    try:
        said, err = attempt(job_id, 0, 1, tmp_path)  # fails: its launcher leaves the next keeper
        assert "started at once (none was prepared)" in err, err
        assert said[:2] == ["True", "FSDP_ORCH_ATTEMPT=0"], said
        assert ended(job_id, 0), "attempt 0's keeper outlived its rank"
        [successor] = job_processes(job_id, 1)
        stop_job_processes(job_id, 0, grace=2.0)  # the supervisor's stop of attempt 0
        assert job_processes(job_id, 1) == [successor]

        said, err = attempt(job_id, 1, 0, tmp_path)  # succeeds: its next keeper is ended
        assert "attempt 1: 1 rank(s) started from the standby (prepared by the attempt before)" \
            in err, err
        assert said == ["True", "FSDP_ORCH_ATTEMPT=1", str(successor)], said
        assert ended(job_id, 1) and ended(job_id, 2), "a keeper outlived the job's last attempt"
        log = Path(standby_folder(user_tmp_root(), job_id, 0), "attempt-2.log").read_text()
        assert f"forked from attempt 1's (pid {successor})" in log, log
    finally:
        stop_job_processes(job_id, grace=1.0)
        shutil.rmtree(os.path.join(user_tmp_root(), job_id), ignore_errors=True)
