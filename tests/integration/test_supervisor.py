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
import yaml
from cli_harness import copy_demo, demo_args, iso_epoch, job_events, kill_supervisor

from fsdp_orch.backends.local import LocalLauncher
from fsdp_orch.backends.slurm.allocation import on_time_limit_warning
from fsdp_orch.control.job_control import record_submission
from fsdp_orch.control.submit_request import SubmitRequest
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
    restart_yaml = json.dumps({"backoff": {"initial": "1s", "multiplier": 2, "max": "10s",
                                           "jitter": 0},
                               **restart})
    job.write_text("name: crashy\nlauncher: python\n"
                   "command: [bash, -c, 'echo starting; exit 1']\n"
                   f"restart: {restart_yaml}\n")
    return job


def supervise_in_process(tmp_path: Path,
                         job: Path) -> tuple[Supervisor, JobIndex, str, list[float]]:
    """The supervisor writes the job's events; the test reads them through the index, as the CLI
    does."""
    home = tmp_path / "home"
    index = JobIndex(Store(home / "jobs.db"), [str(home / "runs")])
    job_id, _, submission = record_submission(index, SubmitRequest(job, "local", home_dir=home))
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
    assert slept == pytest.approx([1.0, 2.0, 4.0], abs=0.5)  # initial 1s, multiplier 2, no jitter
    # counted from each verdict
    assert all(s < d for s, d in zip(slept, [1.0, 2.0, 4.0], strict=True))
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
    assert slept == pytest.approx([1.0, 2.0], abs=0.5)
    status = status_of(index, job_id)
    assert status["attempts"] == 3
    assert "crash loop: 3 attempts in a row made no progress" in status["reason"]


def test_attempts_the_scheduler_took_away_use_no_restart_budget(tmp_path):
    """After three requeues (SLURM's time limit), the job still has its whole budget of restarts."""
    sup, index, job_id, slept = supervise_in_process(
        tmp_path, crashing_job(tmp_path, max_restarts=2, crash_loop_attempts=10))
    sup.requeued_attempts = 3  # attempts 0-2 ended in requeues, as run_supervisor counts them
    assert sup.run(first_attempt=3) is JobState.FAILED
    assert slept == pytest.approx([1.0, 2.0], abs=0.5)
    status = status_of(index, job_id)
    assert [f["action"] for f in status["failures"]] == ["restart", "restart", "give_up"]
    assert "2 of restart.max_restarts=2" in status["reason"]


def test_killing_the_supervisor_and_reattaching_keeps_one_attempt_and_succeeds(cli, demo):
    job_id = cli.run("submit", "--cluster", "local", str(demo), "--set",
                     demo_args(60, "--sleep-per-step", "0.3"),
                     "--set", "checkpoint.interval=10", check=True).stdout.strip()
    cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 5, timeout=180,
                   what="five steps")
    store = Store(cli.home / "jobs.db")
    workers = job_processes(job_id)
    old = kill_supervisor(cli, job_id)
    assert not pid_alive(old)
    assert job_processes(job_id) == workers, "killing the supervisor must not touch the attempt"

    status = cli.status(job_id)  # notices the dead supervisor and re-attaches a new one
    assert status["state"] == "RUNNING"
    # The new supervisor records its own pid (an event) once it holds the job's lock: a Python
    # start-up away, which took over 1 s beside stress-ng. Read into the index here as status reads
    # it, without status's refresh (which, meanwhile, would start another supervisor that finds the
    # lock held and exits). 60 s: a start-up many times slower than a loaded machine's.
    index = JobIndex(store, [str(cli.home / "runs")])
    deadline = time.monotonic() + 60
    while store.job(job_id).supervisor_pid == old and time.monotonic() < deadline:
        time.sleep(0.1)
        index.ingest([job_id])
    new = store.job(job_id).supervisor_pid
    assert new != old and pid_alive(new, must_contain=job_id)
    for _ in range(3):
        # more refreshes must not start a second supervisor or attempt
        cli.run("status", check=True)
    assert store.job(job_id).supervisor_pid == new
    supervisors = [p for p in os.listdir("/proc")
                   if p.isdigit() and pid_alive(int(p), must_contain=job_id)
                   and b"fsdp_orch.supervise" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(supervisors) == 1, supervisors
    final = cli.wait_until(job_id, lambda s: s["state"] in ("SUCCEEDED", "FAILED"), timeout=300,
                           what="end")
    assert final["state"] == "SUCCEEDED", final
    assert final["attempts"] == 1 and final["failures"] == []
    assert final["progress"]["step"] == 60
    # The new supervisor took up the attempt as it was: its first step once, and no false "hang
    # detection off" while the node's agent reconnected to it (issue 42's audit found both).
    events = job_events(cli, job_id)
    assert [e["kind"] for e in events].count("first_step") == 1, events
    assert not [e for e in events if e["kind"] == "hang_detection" and e.get("off_because")], events


def test_the_warning_before_a_time_limit_records_a_requeue_and_asks_for_it(tmp_path):
    """SLURM's signal before the time limit (USR2 to the batch shell, which is the supervisor),
    through the handler the SLURM kind installs; the requeue itself is SLURM's `scontrol requeue`,
    recorded here instead. The attempt is left to the scheduler, which ends it with the
    allocation."""
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


class NodeZeroSilentUntil(LocalLauncher):
    """The real local launcher, whose attempts say node 0's channel is silent until ``until``
    (monotonic), as a node whose link dropped would, while its ranks run on."""

    def __init__(self, submission, until: list[float]):  # type: ignore[no-untyped-def]
        super().__init__(submission)
        self.until = until

    def launch(self, plan, artifacts):  # type: ignore[no-untyped-def]
        handle = super().launch(plan, artifacts)
        since = time.monotonic()
        handle.silent_nodes = lambda: ({0: time.monotonic() - since}
                                       if time.monotonic() < self.until[0] else {})
        return handle


def test_the_hang_rule_waits_while_a_node_is_silent_and_judges_the_hang_once_it_is_heard(tmp_path):
    """No word from a node is not a hang: rank 1 really hangs at step 12 (2 s floor, 4 s ceiling),
    but while the attempt says node 0 is silent no verdict comes; once it is heard again, the hang
    is judged, as a hang."""
    demo = copy_demo(tmp_path)
    spec = yaml.safe_load(demo.read_text())
    spec.update(args=["--steps", "60", "--seq-len", "64"],
                env={**spec["env"], "FSDP_ORCH_FAULT": "hang:step=12:rank=1"},
                restart={"max_restarts": 0}, watch={**spec["watch"], "heartbeat_timeout": "4s"})
    demo.write_text(yaml.safe_dump(spec))
    home = tmp_path / "home"
    index = JobIndex(Store(home / "jobs.db"), [str(home / "runs")])
    job_id, _, submission = record_submission(index, SubmitRequest(demo, "local", home_dir=home))
    silent_for = 30.0
    until = [time.monotonic() + silent_for]
    heard_again = time.time() + silent_for
    sup = Supervisor(Journal(EventWriter(submission.run_dir, "supervisor"), job_id), submission,
                     NodeZeroSilentUntil(submission, until), backoff_sleep=lambda s: None,
                     rng=random.Random(0))
    assert sup.run() is JobState.FAILED
    status = status_of(index, job_id)
    [failure] = status["failures"]
    assert failure["category"] == "hang", failure
    assert iso_epoch(failure["detected_at"]) >= heard_again - 0.05, (
        "a hang was judged while node 0 was silent")
    assert iso_epoch(failure["detected_at"]) < heard_again + 5, (
        "the hang was not judged once node 0 was heard")
    assert status["progress"]["step"] < 60
    silences = [e for e in status["events"] if e["kind"] == "node_silent"]
    assert (len(silences) == 1
            and silences[0]["message"].startswith("no word from node 0 for ")), silences
    [back] = [e["message"] for e in status["events"] if e["kind"] == "node_heard_again"]
    assert back.startswith("node 0 heard again after about ") and "paused, not lost" in back, back
