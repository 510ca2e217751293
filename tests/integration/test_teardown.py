"""After every rank's script has returned, a process that crashes or hangs while the interpreter
shuts down (gloo's teardown does both on torch 2.13, see examples/unchanged) must not turn finished
work into a failure or keep the job running forever. Real torchrun, 2 CPU ranks, no fsdp_orch
import."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "scripts" / "teardown_train.py"


def run(cli, tmp_path: Path, teardown: str) -> dict:  # type: ignore[no-untyped-def]
    shutil.copy(SCRIPT, tmp_path / "train.py")
    marks = tmp_path / "returned"
    marks.mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({
        "name": f"teardown-{teardown}", "script": "train.py", "procs_per_node": 2,
        "args": ["--teardown", teardown],
        "env": {"OMP_NUM_THREADS": "1", "TEARDOWN_MARKS": str(marks)},
        "restart": {"max_restarts": 0},
        "watch": {"startup_timeout": "8s", "heartbeat_timeout": "5s"}}))
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(job), timeout=180)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def test_a_crash_after_every_rank_finished_is_done_not_failed(cli, tmp_path):
    status = run(cli, tmp_path, "abort")
    assert status["state"] == "SUCCEEDED", status
    assert status["failures"] == [] and status["attempts"] == 1
    [event] = [e for e in status["events"] if e["kind"] == "teardown_crash"]
    assert "every rank finished its script" in event["message"]


def test_a_hang_after_every_rank_finished_is_stopped_after_startup_timeout(cli, tmp_path):
    status = run(cli, tmp_path, "hang")
    assert status["state"] == "SUCCEEDED", status
    assert status["failures"] == [] and status["attempts"] == 1
    [event] = [e for e in status["events"] if e["kind"] == "teardown_hang"]
    assert "startup_timeout (8s)" in event["message"]


def test_a_clean_exit_records_nothing(cli, tmp_path):
    status = run(cli, tmp_path, "clean")
    assert status["state"] == "SUCCEEDED" and status["events"] == [], status
