"""After every rank's script has returned, a process that crashes or hangs while the interpreter
shuts down (gloo's teardown does both on torch 2.13, see examples/unchanged) must not turn finished
work into a failure or keep the job running forever. Nor may a rank that hangs after its last step
while a peer has returned (a process group's destructor, at the script's top level) get the job
trained again. Real torchrun, 2 CPU ranks, no fsdp_orch import."""

from __future__ import annotations

import json
import shutil
import threading
from datetime import datetime
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "scripts" / "teardown_train.py"


def run(cli, tmp_path: Path, teardown: str, **fields) -> dict:  # type: ignore[no-untyped-def]
    shutil.copy(SCRIPT, tmp_path / "train.py")
    marks = tmp_path / "returned"
    marks.mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({
        "name": f"teardown-{teardown}", "script": "train.py", "procs_per_node": 2,
        "args": ["--teardown", teardown],
        "env": {"OMP_NUM_THREADS": "1", "TEARDOWN_MARKS": str(marks)},
        "restart": {"max_restarts": 0},
        "watch": {"startup_timeout": "8s", "heartbeat_timeout": "5s"}, **fields}))
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
    """And while it hangs there (8 s, past the 3 s a stall needs), ``status`` says the job is
    finishing, never stalled: r13 of the suite sampled ``RUNNING (stalled 3.0s)`` at a demo's last
    step while its ranks shut down."""
    samples: list[str] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(cli.run("status", timeout=60).stdout)
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        status = run(cli, tmp_path, "hang")
    finally:
        done.set()
        sampler.join(timeout=60)
    assert status["state"] == "SUCCEEDED", status
    assert status["failures"] == [] and status["attempts"] == 1
    [event] = [e for e in status["events"] if e["kind"] == "teardown_hang"]
    assert "startup_timeout (8s)" in event["message"]
    assert not [s for s in samples if "stalled" in s], samples
    assert [s for s in samples if "RUNNING (finishing)" in s], samples


def test_a_clean_exit_records_nothing(cli, tmp_path):
    status = run(cli, tmp_path, "clean")
    assert status["state"] == "SUCCEEDED" and status["events"] == [], status


def stuck_after_the_end(cli, tmp_path: Path, teardown: str) -> dict:  # type: ignore[no-untyped-def]
    """Rank 1 stops after the last step (20) and the DCP save of it, in a native call holding the
    interpreter; rank 0 returns. Restarts allowed: a job trained again would show. Steps of 0.1 s,
    so that each rank's heartbeat has told its steps before it stops."""
    status = run(cli, tmp_path, teardown, args=["--teardown", teardown, "--save-dir", "ckpt",
                                                "--sleep-per-step", "0.1"],
                 checkpoint={"dir": "ckpt"}, restart={"max_restarts": 2,
                                                      "backoff": {"initial": "1s", "jitter": 0}})
    assert status["state"] == "SUCCEEDED", status
    assert status["attempts"] == 1, status
    for rank in (0, 1):  # the training ran once
        assert (tmp_path / "returned" / f"trained-{rank}").read_text() == "trained\n"
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-20"]
    return status


def test_a_rank_stuck_in_native_code_at_the_top_level_after_the_last_step_is_a_teardown_hang(
        cli, tmp_path):
    status = stuck_after_the_end(cli, tmp_path, "native")
    assert status["failures"] == [], status["failures"]
    [event] = [e for e in status["events"] if e["kind"] == "teardown_hang"]
    message = event["message"]
    assert "rank 0 returned from its script after step 20" in message, message
    assert "rank 1 stuck at <module> at train.py:" in message, message
    assert "native: pause" in message, message  # py-spy --native: what the rank sits in
    # well within a minute of the last step (the window is 5 s of heartbeat_timeout)
    after = (datetime.fromisoformat(event["at"])
             - datetime.fromisoformat(status["progress"]["updated_at"])).total_seconds()
    assert after < 60, (event, status["progress"])


def test_a_rank_stuck_after_the_last_step_in_its_own_code_is_judged_but_not_trained_again(
        cli, tmp_path):
    """Its stack shows a function of the script's own: not known to be teardown, so the hang rule
    judges it. The latest checkpoint is the step every rank reached when rank 0 returned: the job
    is complete, and no restart trains past it."""
    status = stuck_after_the_end(cli, tmp_path, "native_in_function")
    assert not [e for e in status["events"] if e["kind"] == "teardown_hang"], status["events"]
    [event] = [e for e in status["events"] if e["kind"] == "training_complete"]
    assert event["message"].startswith("not restarted after hang ("), event["message"]
    assert "(step-20) is at step 20, the step every rank had reached" in event["message"]


def test_a_rank_held_right_after_its_last_fast_step_is_a_teardown_hang_not_trained_again(
        cli, tmp_path):
    """Steps of about a millisecond: the heartbeat file is rewritten at most every 50 ms, and the
    watcher thread cannot write while rank 1 holds the interpreter, so only the step mark the main
    thread wrote at the step says rank 1 reached step 20. Without it rank 1 looked hung at an
    earlier step and the job was trained again (TRL's sft.py in the CI of 1787c8d)."""
    status = run(cli, tmp_path, "native_after_step",
                 restart={"max_restarts": 2, "backoff": {"initial": "1s", "jitter": 0}})
    assert status["state"] == "SUCCEEDED", status
    assert status["attempts"] == 1 and status["failures"] == [], status["failures"]
    for rank in (0, 1):  # the training ran once
        assert (tmp_path / "returned" / f"trained-{rank}").read_text() == "trained\n"
    [event] = [e for e in status["events"] if e["kind"] == "teardown_hang"]
    assert "rank 0 returned from its script after step 20" in event["message"], event["message"]
    assert "rank 1 stuck at <module> at train.py:" in event["message"], event["message"]
