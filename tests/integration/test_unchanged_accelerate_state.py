"""An Accelerate loop written the way transformers' no-trainer examples are
(examples/unchanged/accelerate_save_state): ``accelerator.save_state(f"out/step_{N}")`` and
``--resume_from_checkpoint PATH``, under ``launcher: accelerate`` on 2 CPU processes, with only
``checkpoint.dir`` and ``resume_args`` set. After a hang injected on rank 1 it resumes from its
latest ``step_N`` (its own "Resumed from checkpoint" line), status shows that step, and no earlier
state is written over a ``step_N``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_harness import culprit_leads, why

pytestmark = pytest.mark.slow

ARGS = ["--output_dir", "out", "--checkpointing_steps", "20", "--max_train_steps", "80"]


def test_an_accelerate_loop_resumes_from_its_latest_save_state_folder(unchanged):
    cli, job = unchanged("accelerate_save_state")
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(job),
                   "--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0",
                   "--set", "watch.heartbeat_timeout=5s", "--set", "watch.startup_timeout=90s",
                   "--set", "args=" + json.dumps(ARGS), "--set",
                   "env.FSDP_ORCH_FAULT=hang:step=50:rank=1")
    assert proc.stdout.strip(), proc.stderr
    status = json.loads(proc.stdout)
    assert status["state"] == "SUCCEEDED", why(status)
    [failure] = status["failures"]
    assert failure["category"] == "hang" and failure["attempt"] == 0, failure
    assert culprit_leads(failure["evidence"], 1), failure["evidence"]
    out = job.parent / "out"
    launch = (Path(status["run_dir"]) / "attempt-1" / "launch.sh").read_text()
    assert (f"--resume_from_checkpoint {out / 'step_40'}" in launch
            and "FSDP_ORCH_RESUME_STEP=40" in launch)
    first = cli.run("logs", status["id"], "--attempt", "0", check=True).stdout
    second = cli.run("logs", status["id"], "--attempt", "1", check=True).stdout
    assert f"Resumed from checkpoint: {out / 'step_40'}" in second, second[-2000:]
    # Each step_N was saved once, by the attempt that reached it: none again from an earlier state.
    # Two ranks share the log: another rank's prefix may follow a line, so read the name alone.
    saved_first = re.findall(r"saved state.*?out/(step_\d+)", first)
    saved_second = re.findall(r"saved state.*?out/(step_\d+)", second)
    assert (saved_first == ["step_20", "step_40"]
            and saved_second == ["step_60", "step_80"]), (saved_first, saved_second)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("step_")) == [
        "step_20", "step_40", "step_60", "step_80"]
    assert status["last_checkpoint_step"] == 80 and status["progress"]["step"] == 80
