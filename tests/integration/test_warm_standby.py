"""The warm standby on real processes: the demo crashes once (an injected fault) and resumes. The
second attempt's ranks start from the keeper the first attempt prepared, and ``-X importtime``
(PYTHONPROFILEIMPORTTIME) in the ranks shows no ``import torch`` in their start-up, where the same
job with ``launch.standby: off`` shows it in every rank. Both runs end with the same parameters."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from cli_harness import demo_args

from fsdp_orch.nodeagent.beat_dir import private_beat_dir, user_tmp_root
from fsdp_orch.standby.launch import start_keeper
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


def run(cli, demo: Path, *extra: str) -> tuple[dict, Path]:  # type: ignore[no-untyped-def]
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(demo), *SETTINGS, *extra)
    status = json.loads(proc.stdout) if proc.stdout.strip() else {}
    assert proc.returncode == 0, (status, proc.stderr)
    assert status["state"] == "SUCCEEDED" and status["attempts"] == 2, status
    return status, cli.home / "runs" / status["id"]


def rank_stderr(run_dir: Path, attempt: int) -> dict[str, str]:
    """Each rank's stderr as its launcher kept it (torchrun's --log-dir layout, or the
    standby's)."""
    files = sorted((run_dir / f"attempt-{attempt}").glob("node-0/*/attempt_0/*/stderr.log"))
    return {f.parent.name: f.read_text(errors="replace") for f in files}


def test_the_second_attempt_starts_from_the_standby_without_importing_torch(cli, demo):
    _, cold_dir = run(cli, demo, "--set", "launch.standby=off")
    # its first attempt crashes in its first seconds: prepared at once, not after the default 10 s
    _, warm_dir = run(cli, demo, "--fresh", "--set", "launch.prepare_standby_after=0s")

    cold = rank_stderr(cold_dir, 1)
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
    assert warm_result["resumed_from"] == cold_result["resumed_from"] == 5
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
