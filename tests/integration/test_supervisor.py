"""The supervisor in-process with the real local launcher and an injected backoff sleep, and the
supervisor killed with SIGKILL mid-run and re-attached by `status`."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from fsdp_orch.backends.local import LocalLauncher
from fsdp_orch.backends.slurm.allocation import on_time_limit_warning
from fsdp_orch.control.job_control import record_submission
from fsdp_orch.observe.proctree import job_processes, pid_alive, stop_job_processes
from fsdp_orch.record.events import EventWriter
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.journal import Journal
from fsdp_orch.record.store import Store
from fsdp_orch.supervise.supervisor import Supervisor
from fsdp_orch.vocab.states import JobState

pytestmark = pytest.mark.slow


def crashing_job(tmp_path: Path, **restart) -> Path:
    job = tmp_path / "crashy.yaml"
    restart_yaml = json.dumps({"backoff": {"initial": "1s", "multiplier": 2, "max": "10s", "jitter": 0},
                               **restart})
    job.write_text("name: crashy\nlauncher: python\n"
                   "command: [bash, -c, 'echo starting; exit 1']\n"
                   f"restart: {restart_yaml}\n")
    return job


def supervise_in_process(tmp_path: Path, job: Path) -> tuple[Supervisor, JobIndex, str, list[float]]:
    """The supervisor writes the job's events; the test reads them through the index, as the CLI does."""
    home = tmp_path / "home"
    index = JobIndex(Store(home / "jobs.db"), [str(home / "runs")])
    job_id, _, submission = record_submission(index, job, "local", home_dir=home)
    slept: list[float] = []
    journal = Journal(EventWriter(submission.run_dir, "supervisor"), job_id)
    sup = Supervisor(journal, submission, LocalLauncher(submission), backoff_sleep=slept.append,
                     rng=random.Random(0))
    return sup, index, job_id, slept


def status_of(index: JobIndex, job_id: str) -> dict:
    index.ingest([job_id])
    return json.loads(index.store.status_json(job_id) or "null")


def test_a_job_that_crashes_every_attempt_stops_at_the_budget_with_growing_delays(tmp_path):
    sup, index, job_id, slept = supervise_in_process(
        tmp_path, crashing_job(tmp_path, max_restarts=3, crash_loop_attempts=10))
    assert sup.run() is JobState.FAILED
    assert slept == [1.0, 2.0, 4.0]  # initial 1s, multiplier 2, no jitter
    status = status_of(index, job_id)
    assert status["state"] == "FAILED"
    assert status["attempts"] == 4 and status["restarts"] == 3
    assert [f["action"] for f in status["failures"]] == ["restart", "restart", "restart", "give_up"]
    assert all("exited with code 1" in f["evidence"] for f in status["failures"])
    assert "restart budget exhausted" in status["reason"]


def test_a_crash_loop_gives_up_before_the_budget(tmp_path):
    sup, index, job_id, slept = supervise_in_process(
        tmp_path, crashing_job(tmp_path, max_restarts=10, crash_loop_attempts=3))
    assert sup.run() is JobState.FAILED
    assert slept == [1.0, 2.0]
    status = status_of(index, job_id)
    assert status["attempts"] == 3
    assert "crash loop: 3 attempts in a row made no progress" in status["reason"]


def test_attempts_the_scheduler_took_away_use_no_restart_budget(tmp_path):
    """After three requeues (SLURM's time limit), the job still has its whole budget of restarts."""
    sup, index, job_id, slept = supervise_in_process(
        tmp_path, crashing_job(tmp_path, max_restarts=2, crash_loop_attempts=10))
    sup.requeued_attempts = 3  # attempts 0-2 ended in requeues, as run_supervisor counts them
    assert sup.run(first_attempt=3) is JobState.FAILED
    assert slept == [1.0, 2.0]
    status = status_of(index, job_id)
    assert [f["action"] for f in status["failures"]] == ["restart", "restart", "give_up"]
    assert "2 of restart.max_restarts=2" in status["reason"]


def test_killing_the_supervisor_and_reattaching_keeps_one_attempt_and_succeeds(cli, demo):
    job_id = cli.run("submit", "--cluster", "local", str(demo), "--set", "args=[--steps, 60]",
                     "--set", "checkpoint.interval=10", check=True).stdout.strip()
    cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 5, timeout=180,
                   what="five steps")
    store = Store(cli.home / "jobs.db")
    old = store.job(job_id).supervisor_pid
    workers = job_processes(job_id)
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_alive(old) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(old)
    assert job_processes(job_id) == workers, "killing the supervisor must not touch the attempt"

    status = cli.status(job_id)  # notices the dead supervisor and re-attaches a new one
    assert status["state"] == "RUNNING"
    for _ in range(3):
        cli.run("status", check=True)  # more refreshes must not start a second supervisor or attempt
    time.sleep(1.0)
    new = store.job(job_id).supervisor_pid
    assert new != old and pid_alive(new, must_contain=job_id)
    supervisors = [p for p in os.listdir("/proc") if p.isdigit() and pid_alive(int(p), must_contain=job_id)
                   and b"fsdp_orch.supervise" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(supervisors) == 1, supervisors
    final = cli.wait_until(job_id, lambda s: s["state"] in ("SUCCEEDED", "FAILED"), timeout=300, what="end")
    assert final["state"] == "SUCCEEDED", final
    assert final["attempts"] == 1 and final["failures"] == []
    assert final["progress"]["step"] == 60


def test_the_warning_before_a_time_limit_records_a_requeue_and_asks_for_it(tmp_path):
    """SLURM's signal before the time limit (USR2 to the batch shell, which is the supervisor),
    through the handler the SLURM kind installs; the requeue itself is SLURM's `scontrol requeue`,
    recorded here instead. The attempt is left to the scheduler, which ends it with the allocation."""
    job = tmp_path / "sleepy.yaml"
    job.write_text("name: sleepy\nlauncher: python\ncommand: [sleep, '60']\n")
    sup, index, job_id, slept = supervise_in_process(tmp_path, job)
    asked: list[str] = []
    previous = signal.getsignal(signal.SIGUSR2)
    on_time_limit_warning(requeue=lambda: asked.append(status_of(index, job_id)["state"]))
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGUSR2))
    timer.start()
    try:
        assert sup.run() is JobState.RESTARTING
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR2, previous)
        stop_job_processes(job_id, grace=2.0)
    assert asked == ["RESTARTING"]  # recorded before the scheduler is asked to requeue
    status = status_of(index, job_id)
    assert status["state"] == "RESTARTING" and slept == []
    [failure] = status["failures"]
    assert failure["action"] == "requeue" and failure["category"] == "preemption_or_node_lost"
    assert "time limit or preemption" in failure["evidence"]
