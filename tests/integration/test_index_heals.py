"""The index heals itself, through real ``python -m fsdp_orch status --json`` processes: garbage
over ``jobs.db`` is read around by ``status`` (one warning) and moved aside by the next writer;
and, round after round, the index deleted and then 8 ``status --json`` at once while a job is
submitted, every call lists every job there was before the round, and none fails."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fsdp_orch.record.events import EventWriter
from fsdp_orch.record.index import open_index
from fsdp_orch.record.journal import Journal

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

ROUNDS, PARALLEL = 50, 8


def submit(home: Path, job_id: str) -> None:
    """A job as its submission leaves it in the logs (the CLI's submit writes this event first)."""
    run_dir = home / "runs" / job_id
    Journal(EventWriter(run_dir, "submit"), job_id).submitted(
        name=job_id, cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
        job_file=None, spec_hash=None, idempotency_key=None)


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FSDP_ORCH_DB"}
    return {**env, "FSDP_ORCH_HOME": str(home),
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def start_status(home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "fsdp_orch", "status", "--json"],
                            cwd=home.parent, env=env_for(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def listed_by(proc: subprocess.Popen[str]) -> tuple[int, list[str], str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, sorted(job["id"] for job in json.loads(out or "[]")), err


def test_garbage_over_the_index_is_left_to_a_writer_and_status_works_meanwhile(
        tmp_path: Path) -> None:
    """``status`` only looks (issue 61: a read-only command writes nothing): over a garbage index it
    lists every job from the event logs with one warning line naming the file, and leaves the file
    be; the next command that writes moves it aside, keeps it, and builds the index again."""
    home = tmp_path / "home"
    jobs = [f"job{i:03d}" for i in range(5)]
    for job_id in jobs:
        submit(home, job_id)
    code, ids, err = listed_by(start_status(home))
    assert (code, ids, err) == (0, jobs, "")
    garbage = os.urandom(8192)
    (home / "jobs.db").write_bytes(garbage)

    for _ in range(2):
        code, ids, err = listed_by(start_status(home))
        assert code == 0 and ids == jobs, err
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        assert str(home / "jobs.db") in err and "not an SQLite database" in err, err
        assert (home / "jobs.db").read_bytes() == garbage
    with open_index(str(home)) as index:  # a writer: submit or cancel
        assert sorted(index.store.job_ids()) == jobs
    moved = [p for p in home.iterdir() if p.name.startswith("jobs.db.corrupt-")]
    assert len(moved) == 1 and moved[0].read_bytes() == garbage
    assert listed_by(start_status(home)) == (0, jobs, "")  # healed: no warning again


def test_deleting_the_index_under_parallel_status_calls_and_a_submit_loses_no_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FSDP_ORCH_DB", raising=False)
    monkeypatch.chdir(tmp_path)  # this process's own look at the index below: no ./clusters here
    home = tmp_path / "home"
    jobs = [f"job{i:03d}" for i in range(5)]
    for job_id in jobs:
        submit(home, job_id)
    rng = random.Random(24)
    short: list[str] = []
    started = time.monotonic()
    for round_no in range(ROUNDS):
        for name in ("jobs.db", "jobs.db-wal", "jobs.db-shm"):
            (home / name).unlink(missing_ok=True)
        procs = [start_status(home) for _ in range(PARALLEL)]
        new = f"new{round_no:03d}"
        submitter = threading.Timer(rng.uniform(0, 0.3), submit, (home, new))
        submitter.start()
        for proc in procs:
            code, ids, err = listed_by(proc)
            assert code == 0 and err == "", f"round {round_no}: exit {code}\n{err}"
            if not set(jobs) <= set(ids):
                short.append(f"round {round_no}: listed {len(ids)}, missing "
                             f"{sorted(set(jobs) - set(ids))}")
        submitter.join()
        jobs.append(new)
        # the job submitted meanwhile is found by the next look
        with open_index(str(home)) as index:
            index.ingest()
            assert index.store.job_ids() == set(jobs), f"round {round_no}"
    assert not short, short
    print(f"{ROUNDS} rounds of {PARALLEL} parallel status --json: "
          f"{time.monotonic() - started:.1f} s")
