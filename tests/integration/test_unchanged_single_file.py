"""A nanoGPT-shaped script (examples/unchanged/single_file): one checkpoint file, out/ckpt.pt, with
iter_num inside, resumed with --init_from=resume. 2 CPU ranks under torchrun, gloo, a hang injected
on rank 1 after a checkpoint. Configured with checkpoint.file it resumes from the file's iteration;
configured the way a user first writes it (checkpoint.dir: out, no checkpoint.file) the restart
cannot resume, and the file is moved aside and kept, never overwritten."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from cli_harness import culprit_leads, why

pytestmark = pytest.mark.slow

ARGS = ["--max_iters=40", "--eval_interval=10", "--sleep_per_iter=0.02"]
HANG = "env.FSDP_ORCH_FAULT=hang:step=25:rank=1"  # after the saves of iterations 10 and 20


def submit(cli, job: Path, *extra: str) -> dict:  # type: ignore[no-untyped-def]
    proc = cli.run("submit", "--cluster", "local", "--wait", "--json", str(job),
                   "--set", "restart.backoff.initial=1s", "--set", "restart.backoff.jitter=0",
                   "--set", "watch.heartbeat_timeout=5s", "--set", "watch.startup_timeout=60s",
                   "--set", "args=" + json.dumps(ARGS), "--set", HANG, *extra)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def saved(job: Path) -> list[tuple[int, str]]:
    """Every (iter_num, sha256) the script saved, in order."""
    lines = (job.parent / "out" / "saved.log").read_text().split()
    return [(int(lines[i]), lines[i + 1]) for i in range(0, len(lines), 2)]


def attempt_logs(cli, job_id: str, attempt: int) -> str:  # type: ignore[no-untyped-def]
    return cli.run("logs", job_id, "--attempt", str(attempt), check=True).stdout


def test_checkpoint_file_resumes_from_the_iteration_inside_the_file(unchanged):
    cli, job = unchanged("single_file")
    status = submit(cli, job)
    assert status["state"] == "SUCCEEDED", why(status)
    [failure] = status["failures"]
    assert failure["category"] == "hang" and failure["attempt"] == 0, failure
    assert culprit_leads(failure["evidence"], 1), failure["evidence"]
    # The restart was told to resume, with the step read from inside the file.
    launch = (Path(status["run_dir"]) / "attempt-1" / "launch.sh").read_text()
    assert "--init_from=resume" in launch and "FSDP_ORCH_RESUME_STEP=20" in launch, launch
    assert "resuming from iteration 20" in attempt_logs(cli, status["id"], 1)
    # Never an older checkpoint over a newer one: the saved iterations only go up.
    iters = [it for it, _ in saved(job)]
    assert iters == sorted(iters) and iters[0] == 10 and iters[-1] == 40, iters
    assert 20 in iters and not any(it < 20 for it in iters[iters.index(20) + 1:])
    # status shows the file's step, and the progress continues from it.
    ckpt = job.parent / "out" / "ckpt.pt"
    assert status["last_checkpoint_step"] == 40
    assert status["last_checkpoint"] == {"path": str(ckpt), "step": 40, "step_known": True,
                                         "step_unknown_because": None}
    assert status["progress"]["step"] == 40
    assert not (job.parent / "out" / ".fsdp-orch-incomplete").exists()


def test_checkpoint_dir_alone_keeps_the_file_aside_and_names_checkpoint_file(unchanged):
    cli, job = unchanged("single_file")
    status = submit(cli, job, "--set", "checkpoint.file=null", "--set", "checkpoint.step_key=null",
                    "--set", "checkpoint.dir=out")
    assert status["state"] == "SUCCEEDED", why(status)
    # What attempt 0 saved last (iteration 20) is kept, byte for byte, out of the restart's way.
    first_run = [s for s in saved(job) if s[0] <= 20][:2]
    assert [it for it, _ in first_run] == [10, 20]
    kept = job.parent / "out" / ".fsdp-orch-incomplete" / "ckpt.pt.attempt-1"
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == first_run[-1][1]
    # The restart could not resume (no resume_args added) and says so, naming the setting.
    launch = (Path(status["run_dir"]) / "attempt-1" / "launch.sh").read_text()
    assert "--init_from=resume" not in launch
    events = {e["kind"]: e["message"] for e in status["events"]}
    assert "checkpoint.file: out/ckpt.pt" in events["checkpoint_unreadable"], events
    assert str(kept) in events["checkpoint_unreadable"]
    assert "attempt 1 starts from scratch" in events["restart_from_scratch"], events
    shown = cli.run("status", status["id"], check=True).stdout
    assert "checkpoint.file: out/ckpt.pt" in shown


def test_a_file_of_unknown_step_is_resumed_and_status_says_the_step_is_unknown(unchanged):
    cli, job = unchanged("single_file")
    status = submit(cli, job, "--set", "checkpoint.step_key=null")
    assert status["state"] == "SUCCEEDED", why(status)
    launch = (Path(status["run_dir"]) / "attempt-1" / "launch.sh").read_text()
    assert "--init_from=resume" in launch and "FSDP_ORCH_RESUME_STEP" not in launch, launch
    assert "resuming from iteration 20" in attempt_logs(cli, status["id"], 1)
    assert status["last_checkpoint_step"] is None
    assert status["last_checkpoint"] == {
        "path": str(job.parent / "out" / "ckpt.pt"), "step": None, "step_known": False,
        "step_unknown_because": "the name has no step and checkpoint.step_key is not set"}
    shown = cli.run("status", status["id"], check=True).stdout
    assert "(step unknown: the name has no step and checkpoint.step_key is not set)" in shown, shown
    assert shown.splitlines()[1].split()[-3] == "?", shown  # the CKPT column
