"""Schedules with a one-minute cron, run by the scheduler under an injected clock, submitting real
jobs to the local cluster: exactly the expected ticks, forbid and replace honoured, and a scheduler
killed for real (SIGKILL) between a submit and its record never submits that tick twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fsdp_orch.jobspec.schedule import Schedule
from fsdp_orch.record.index import open_index
from fsdp_orch.schedule.book import ScheduleBook
from fsdp_orch.schedule.commands import add_schedule
from fsdp_orch.schedule.jobs import IndexJobs
from fsdp_orch.schedule.scheduler import Scheduler

pytestmark = pytest.mark.slow

START = datetime(2026, 11, 24, 3, 0, 30, tzinfo=timezone.utc).timestamp()


def minute(m: int) -> str:
    return f"2026-11-24T03:{m:02d}:00+00:00"


class ManualClock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def job_file(tmp_path: Path, name: str, command: list[str]) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nlauncher: python\ncommand: {json.dumps(command)}\n")
    return str(path)


def add(name: str, job: str, concurrency: str, **extra) -> None:
    add_schedule(Schedule(name=name, cron="* * * * *", cluster="local", job_file=job,
                          concurrency=concurrency, **extra), now=START)


def jobs_of(home: Path, schedule: str) -> list[dict]:
    with open_index(str(home)) as index:
        index.ingest()
        jobs = json.loads(index.store.status_json() or "[]")
    return [j for j in jobs if (j.get("origin") or {}).get("schedule") == schedule]


def wait_state(home: Path, job_id: str, states: set[str], timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open_index(str(home)) as index:
            index.ingest([job_id])
            from fsdp_orch.control.liveness import refresh

            refresh(index, [job_id])
            state = index.store.job(job_id).state
        if state in states:
            return state
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still {state}, expected {states}")


def cancel(home: Path, job_id: str) -> None:
    from fsdp_orch.control.job_control import cancel as cancel_job

    with open_index(str(home)) as index:
        index.ingest([job_id])
        cancel_job(index, job_id)


def test_a_minutely_schedule_submits_exactly_the_expected_ticks(home, tmp_path):
    add("minutely", job_file(tmp_path, "quick", ["true"]), "allow")
    clock = ManualClock(START)
    lines: list[str] = []
    with open_index(str(home)) as index:
        scheduler = Scheduler(ScheduleBook(home), IndexJobs(index), clock, clock.sleep,
                              lines.append)
        # The loop sleeps to each tick and handles 03:01 .. 03:05; it stops once it woke at 03:06.
        scheduler.run_forever(should_stop=lambda: clock.now >= START + 5 * 60 + 30)
        assert clock.now == START + 5 * 60 + 30
        scheduler.run_due()  # 03:06
        scheduler.run_due()  # a second pass at the same time submits nothing more
    jobs = jobs_of(home, "minutely")
    assert sorted(j["origin"]["tick"] for j in jobs) == [minute(m) for m in range(1, 7)], lines
    assert [line.split(" ", 2)[2].split()[0] for line in lines] == ["submitted"] * 6, lines
    for job in jobs:
        assert wait_state(home, job["id"], {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    kinds = [e["kind"] for e in ScheduleBook(home).events("minutely")]
    assert (kinds.count("tick_submitted") == 6 and "tick_skipped" not in kinds
            and "ticks_missed" not in kinds)


def test_forbid_skips_a_tick_while_the_previous_run_is_active(home, tmp_path):
    add("nightly", job_file(tmp_path, "long", ["sleep", "300"]), "forbid")
    clock = ManualClock(START + 30)  # 03:01:00
    with open_index(str(home)) as index:
        scheduler = Scheduler(ScheduleBook(home), IndexJobs(index), clock, clock.sleep)
        first = scheduler.run_due()
        assert [o.action for o in first] == ["submitted"]
        wait_state(home, first[0].job, {"RUNNING"})
        clock.now += 60
        second = scheduler.run_due()
        assert [(o.action, o.tick) for o in second] == [("skipped", minute(2))]
        assert first[0].job in (second[0].detail or "")
        cancel(home, first[0].job)
        wait_state(home, first[0].job, {"CANCELLED"})
        clock.now += 60
        third = scheduler.run_due()
        assert [(o.action, o.tick) for o in third] == [("submitted", minute(3))]
        cancel(home, third[0].job)
    skipped = [e for e in ScheduleBook(home).events("nightly") if e["kind"] == "tick_skipped"]
    assert [e["tick"] for e in skipped] == [minute(2)] and "forbid" in skipped[0]["reason"]
    assert sorted(j["origin"]["tick"] for j in jobs_of(home, "nightly")) == [minute(1), minute(3)]


def test_replace_cancels_the_previous_run_then_submits(home, tmp_path):
    add("hourly", job_file(tmp_path, "long", ["sleep", "300"]), "replace")
    clock = ManualClock(START + 30)
    with open_index(str(home)) as index:
        scheduler = Scheduler(ScheduleBook(home), IndexJobs(index), clock, clock.sleep)
        [first] = scheduler.run_due()
        wait_state(home, first.job, {"RUNNING"})
        clock.now += 60
        [second] = scheduler.run_due()
    assert second.action == "submitted" and second.job != first.job
    assert wait_state(home, first.job, {"CANCELLED", "SUCCEEDED", "FAILED"}) == "CANCELLED"
    assert wait_state(home, second.job, {"RUNNING"}) == "RUNNING"
    cancel(home, second.job)
    replaced = [e for e in ScheduleBook(home).events("hourly") if e["kind"] == "run_replaced"]
    assert [e["cancelled"] for e in replaced] == [first.job]


def scheduler_process(home: Path, cwd: Path, clock: str, **env: str) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
    full.update(FSDP_ORCH_HOME=str(home), FSDP_ORCH_TEST_CLOCK=clock, PYTHONUNBUFFERED="1", **env)
    return subprocess.Popen([sys.executable, "-m", "fsdp_orch", "scheduler", "run"], cwd=cwd,
                            env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_scheduler_killed_after_a_submit_does_not_repeat_the_tick(home, tmp_path):
    add("minutely", job_file(tmp_path, "quick", ["true"]), "allow")
    # 20 times real time from 03:00:50: a tick every 3 s; both processes read the same clock.
    clock = f"{START + 20},{time.time()},20"
    marker = tmp_path / "submitted"
    first = scheduler_process(home, tmp_path, clock, FSDP_ORCH_TEST_PAUSE_AFTER_SUBMIT=str(marker))
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), first.communicate(timeout=5)[0]
    time.sleep(0.2)
    job_id = marker.read_text()
    # Another scheduler is refused while the first holds the lock.
    other = subprocess.run([sys.executable, "-m", "fsdp_orch", "scheduler", "run", "--once"],
                           cwd=tmp_path, env={**os.environ, "FSDP_ORCH_HOME": str(home)},
                           capture_output=True, text=True)
    assert other.returncode == 1 and "another scheduler is running" in other.stderr
    first.send_signal(signal.SIGKILL)  # after the submit, before the tick was recorded
    first.wait(timeout=10)

    second = scheduler_process(home, tmp_path, clock)
    try:
        deadline = time.monotonic() + 90
        while len(jobs_of(home, "minutely")) < 4 and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        second.send_signal(signal.SIGTERM)  # systemd's stop: a clean exit
        out = second.communicate(timeout=30)[0]
    assert second.returncode == 0, out
    jobs = jobs_of(home, "minutely")
    ticks = sorted(j["origin"]["tick"] for j in jobs)
    assert len(ticks) == len(set(ticks)) >= 4, out
    assert (ticks[0] == minute(1)
            and [j["id"] for j in jobs if j["origin"]["tick"] == minute(1)] == [job_id])
    assert f"{minute(1)} minutely: submitted {job_id} (found after a restart)" in out
    events = ScheduleBook(home).events("minutely")
    missed = sum(e["count"] for e in events if e["kind"] == "ticks_missed")
    last = int(ticks[-1][14:16])
    # every minute from 03:01 ran once or was missed
    assert len(ticks) + missed == last, (ticks, events)
    for job in jobs:
        wait_state(home, job["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})


def test_init_from_previous_starts_each_run_from_the_last_successful_one(home, tmp_path):
    from tests.cli_harness import copy_demo

    job = copy_demo(tmp_path)
    add_schedule(Schedule(name="retrain", cron="* * * * *", cluster="local", job_file=str(job),
                          overrides=("args=[--steps, 10, --seq-len, 32, --layers, 2]",
                                     "checkpoint.interval=5"),
                          init_from_previous=True), now=START)
    clock = ManualClock(START + 30)
    with open_index(str(home)) as index:
        scheduler = Scheduler(ScheduleBook(home), IndexJobs(index), clock, clock.sleep)
        [first] = scheduler.run_due()
        assert wait_state(home, first.job, {"SUCCEEDED", "FAILED"}, timeout=300) == "SUCCEEDED"
        clock.now += 60
        [second] = scheduler.run_due()
    assert second.action == "submitted" and f"initialised from {first.job}" in (second.detail or "")
    assert wait_state(home, second.job, {"SUCCEEDED", "FAILED"}, timeout=300) == "SUCCEEDED"
    by_id = {j["id"]: j for j in jobs_of(home, "retrain")}
    assert "init_job" not in by_id[first.job]["origin"]
    origin = by_id[second.job]["origin"]
    # each run keeps its checkpoints apart, so the second starts from the first's last one
    assert origin["init_job"] == first.job and origin["init_step"] == 10
    assert Path(origin["init_from"]).parent == job.parent / "checkpoints" / "demo" / first.job
    logs = (Path(by_id[second.job]["run_dir"]) / "attempt-0").rglob("*.log")
    assert any("initialised from" in p.read_text(errors="replace") for p in logs)
