"""SUCCEEDED means the script finished what it does after its last step (issue 67, part 2). The
unchanged Hugging Face Trainer script (examples/unchanged/hf_trainer: a GPT-2 built from a config,
nothing fetched), real torchrun, 2 CPU ranks:

- rank 1 frozen (SIGSTOP) right after the last checkpoint (``checkpoint-20`` = max_steps) is
  complete: the job is not trained again (no ``checkpoint-21``), 1 attempt, and its final model is
  there: SUCCEEDED;
- rank 0 killed inside the final ``save_model()``: INCOMPLETE, ``status --json`` names the missing
  final model, and ``submit --wait`` exits 1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cli_harness import why

from fsdp_orch.nodeagent.beat_dir import read_node_heartbeats

pytestmark = pytest.mark.slow

MAX_STEPS = 20
ARGS = ["--output_dir", "out", "--max_steps", str(MAX_STEPS), "--save_steps", "10",
        "--logging_steps", "5", "--per_device_train_batch_size", "8", "--seq_len", "32",
        "--use_cpu", "--ddp_find_unused_parameters", "false", "--report_to", "none"]
FAST = ["--set", "watch.startup_timeout=8s", "--set", "watch.heartbeat_timeout=4s",
        "--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0",
        "--set", "args=" + json.dumps(ARGS)]
SAVE_MARK = "final-save-begins"


class Submitted:
    """``submit --wait --json`` in a thread: its exit status and final status once it returns."""

    def __init__(self, cli, job: Path, *extra: str):  # type: ignore[no-untyped-def]
        self.proc: subprocess.CompletedProcess[str] | None = None
        self.thread = threading.Thread(target=lambda: setattr(self, "proc", cli.run(
            "submit", "--cluster", "local", "--wait", "--json", str(job), *FAST, *extra,
            timeout=240)))
        self.thread.start()

    def result(self) -> tuple[int, dict]:
        self.thread.join(timeout=260)
        assert self.proc is not None and self.proc.stdout.strip(), self.proc
        return self.proc.returncode, json.loads(self.proc.stdout)


def wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def rank_pid(cli, rank: int) -> int:  # type: ignore[no-untyped-def]
    listed = json.loads(cli.run("status", "--json", check=True).stdout)
    beats = read_node_heartbeats(listed[-1]["id"], 0)
    assert rank in beats, beats
    return int(beats[rank].pid)


def test_a_rank_frozen_after_the_last_checkpoint_is_not_trained_again(unchanged):
    cli, job = unchanged("hf_trainer")
    out = job.parent / "out"
    run = Submitted(cli, job)
    wait_for(out / f"checkpoint-{MAX_STEPS}" / "trainer_state.json")
    pid = rank_pid(cli, 1)
    os.kill(pid, signal.SIGSTOP)
    try:
        code, status = run.result()
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-20"]
    assert status["attempts"] == 1, why(status)
    # Ended as rank 1 was when frozen: waiting in the script's barrier after rank 0 returned (a
    # teardown_hang, or training_complete at the step every rank reached), or before (rank 0
    # waits for it: training_complete, the Trainer's trainer_state.json at max_steps).
    kinds = {e["kind"]: e["message"] for e in status["events"]}
    assert "teardown_hang" in kinds or "training_complete" in kinds, why(status)
    if "training_complete" in kinds and "every rank had reached" not in kinds["training_complete"]:
        assert "global_step 20, max_steps reached" in kinds["training_complete"], kinds
    # whether rank 0 got to save the final model before it waited for rank 1 is the ranks' race;
    # what status says of it must be true either way
    if (out / "model.safetensors").exists():
        assert (status["state"], status["finished"], code) == ("SUCCEEDED", True, 0), why(status)
    else:
        assert (status["state"], status["finished"], code) == ("INCOMPLETE", False, 1), why(status)


def test_rank_0_killed_inside_the_final_save_is_incomplete_with_the_model_named(unchanged):
    cli, job = unchanged("hf_trainer")
    script = job.parent / "train.py"
    text = script.read_text()
    # a test copy: rank 0 marks the final save's start and sleeps inside it, to be killed there
    script.write_text(text.replace("import logging\n", "import logging\nimport os\n", 1).replace(
        "    trainer.save_model()\n",
        "    if trainer.is_world_process_zero() and os.environ.get('SAVE_MARK'):\n"
        "        open(os.environ['SAVE_MARK'], 'w').close()\n"
        "        time.sleep(60)\n"
        "    trainer.save_model()\n", 1))
    mark = job.parent / SAVE_MARK
    run = Submitted(cli, job, "--set", f"env.SAVE_MARK={mark}")
    wait_for(mark)
    os.kill(rank_pid(cli, 0), signal.SIGKILL)
    code, status = run.result()
    out = job.parent / "out"
    assert status["state"] == "INCOMPLETE", why(status)
    assert code == 1 and status["attempts"] == 1 and status["finished"] is False
    [missing] = status["missing"]
    assert "final model" in missing and str(out) in missing, missing
    assert "final outputs are missing" in status["reason"], status["reason"]
    assert not (out / "model.safetensors").exists()
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-20"]
    table = cli.run("status", status["id"], check=True).stdout
    assert "INCOMPLETE" in table and "finished: no; missing: " in table, table
