"""The index's database as a cache of folded statuses: its schema version (another version is
dropped and rebuilt from the event logs, never migrated), WAL, file mode, listing order and limits,
prefix lookup, parameters not SQL, idempotency keys, and many processes at once."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import stat
import traceback
from pathlib import Path

import pytest

from fsdp_orch.record.events import EventWriter
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.journal import Journal
from fsdp_orch.record.status import JobStatus
from fsdp_orch.record.store import Store
from fsdp_orch.record.store_schema import SCHEMA_VERSION


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    with Store(tmp_path / "home" / "jobs.db") as s:
        yield s


def status(job_id: str = "j1", created_at: float = 1000.0, **fields: object) -> JobStatus:
    return JobStatus(id=job_id, name=str(fields.pop("name", "demo")), cluster="local", kind="local",
                     run_dir=f"/runs/{job_id}", created_at=created_at,
                     **fields)  # type: ignore[arg-type]


def submit(runs: Path, job_id: str, *, key: str | None = None, name: str = "demo") -> Path:
    run_dir = runs / job_id
    Journal(EventWriter(run_dir, "submit"), job_id).submitted(
        name=name, cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
        job_file=None, spec_hash=None, idempotency_key=key)
    return run_dir


def test_schema_version_wal_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "home" / "jobs.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with Store(path) as s:
        s.put(status())
        for extra in ("-wal", "-shm"):
            side = path.with_name(path.name + extra)
            if side.exists():
                assert stat.S_IMODE(side.stat().st_mode) == 0o600, side


def test_mode_0600_even_with_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        Store(tmp_path / "jobs.db").close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "jobs.db").stat().st_mode) == 0o600


@pytest.mark.parametrize("version", [5, SCHEMA_VERSION + 1])
def test_another_schema_version_is_dropped_and_rebuilt_from_the_event_logs(
        tmp_path: Path, version: int) -> None:
    """An older fsdp-orch's database (or a newer one's) is a cache like this one: no migration, the
    index reads the logs again and lists the same jobs."""
    runs = tmp_path / "runs"
    submit(runs, "aaa111", name="kept")
    path = tmp_path / "jobs.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, name TEXT, state TEXT)")
    conn.execute("CREATE TABLE failures (job_id TEXT, category TEXT)")
    conn.execute("INSERT INTO jobs VALUES ('stale', 'gone', 'RUNNING')")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    with JobIndex(Store(path), [str(runs)], warn=lambda text: None) as index:
        index.ingest()
        assert index.store.job_ids() == {"aaa111"}
        assert index.store.job("aaa111").name == "kept"  # type: ignore[union-attr]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "failures" not in tables and {"jobs", "ingested", "meta"} <= tables


def test_a_status_is_given_back_as_it_was_kept(store: Store) -> None:
    kept = status(attempts=2, restarts=1, state="RUNNING", supervisor_pid=42, backend_ref="pgid:43",
                  progress_step=5, progress_loss=0.5, progress_at=1001.0, origin={"schedule": "s"})
    assert store.put(kept, [False, 1001.0, True, "supervisor-x.jsonl", 3])
    assert store.job("j1") == kept
    assert store.last_key("j1") == [False, 1001.0, True, "supervisor-x.jsonl", 3]
    assert json.loads(store.status_json("j1") or "null") == kept.to_json()
    assert [s.id for s in store.active_jobs()] == ["j1"]
    assert store.put(status(state="SUCCEEDED", ended_at=1002.0))
    assert (store.active_jobs() == []
            and store.job("j1").state == "SUCCEEDED")  # type: ignore[union-attr]
    assert store.job("nope") is None and store.status_json("nope") is None


def test_the_list_is_oldest_first_and_limited(store: Store) -> None:
    ids = [f"j{i}" for i in range(5)]
    for i, job_id in reversed(list(enumerate(ids))):
        store.put(status(job_id, created_at=1000.0 + i))
    assert [j["id"] for j in json.loads(store.status_json() or "[]")] == ids
    assert [j["id"] for j in json.loads(store.status_json(limit=2) or "[]")] == ids[-2:]
    assert [j.id for j in store.jobs(limit=2)] == ids[-2:] and [j.id for j in store.jobs()] == ids


def test_values_are_parameters_not_sql(store: Store) -> None:
    evil = "x'); DROP TABLE jobs; --"
    store.put(status("abcd1234", name=evil, idempotency_key=evil, reason=evil))
    doc = json.loads(store.status_json("abcd1234") or "null")
    assert doc["name"] == evil and doc["reason"] == evil
    assert store.find_job_id("abcd") == "abcd1234" and store.job_for_key(evil) == "abcd1234"
    assert store.find_job_id("%") is None and store.find_job_id("_") is None


def test_an_idempotency_key_belongs_to_one_job(store: Store) -> None:
    assert store.put(status("first", idempotency_key="k1"))
    assert not store.put(status("second", idempotency_key="k1"))
    # the same job, updated
    assert store.put(status("first", idempotency_key="k1", state="RUNNING"))
    assert store.job_ids() == {"first"} and store.job_for_key("k1") == "first"


def test_a_second_submission_with_a_used_key_is_not_indexed(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    submit(runs, "first1", key="nightly@03:00")
    submit(runs, "second", key="nightly@03:00")
    with JobIndex(Store(tmp_path / "jobs.db"), [str(runs)], warn=lambda text: None) as index:
        index.ingest()
        index.ingest()
        assert index.store.job_ids() == {"first1"}


# --- many processes at once ---------------------------------------------------------------------

WORKERS = 12
JOBS_EACH = 6


def _worker(db: str, runs: str, index_no: int, barrier,  # type: ignore[no-untyped-def]
            results) -> None:
    try:
        barrier.wait(timeout=60)
        ids = []
        with JobIndex(Store(Path(db)), [runs], warn=lambda text: None) as index:
            for i in range(JOBS_EACH):
                job_id = f"w{index_no:02d}j{i}"
                run_dir = Path(runs) / job_id
                index.journal(job_id, role="submit", run_dir=str(run_dir)).submitted(
                    name=job_id, cluster="local", kind="local", spec_json="{}",
                    run_dir=str(run_dir),
                    job_file=None, spec_hash=None, idempotency_key=f"{index_no}-{i}")
                supervisor = Journal(EventWriter(run_dir, "supervisor"), job_id)
                supervisor.start_attempt(0, resume_from=None)
                supervisor.progress(i, 1.0 / (i + 1), 0.0)
                index.ingest()
                assert index.store.has_job(job_id)
                ids.append(job_id)
                json.loads(index.store.status_json() or "null")
        results.put(("ok", index_no, ids))
    except BaseException:
        results.put(("error", index_no, traceback.format_exc()))


def test_many_processes_lose_nothing(tmp_path: Path) -> None:
    db, runs = tmp_path / "home" / "jobs.db", tmp_path / "runs"
    runs.mkdir()
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(db), str(runs), i, barrier, results))
             for i in range(WORKERS)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [o[2] for o in outcomes if o[0] == "error"]
    assert not errors, errors[0]
    created = sorted(i for o in outcomes for i in o[2])
    assert len(created) == WORKERS * JOBS_EACH
    with JobIndex(Store(db), [str(runs)], warn=lambda text: None) as index:
        index.ingest()
        listed = json.loads(index.store.status_json() or "[]")
        assert sorted(j["id"] for j in listed) == created
        wrong = [(j["id"], j["state"], j["progress"]) for j in listed
                 if j["progress"] is None or j["state"] != "RUNNING"]
        assert not wrong


def test_a_running_jobs_live_step_is_read_at_each_read_and_never_kept(store, tmp_path: Path):
    """The supervisor's progress.json (record.live_progress) moves a running job's STEP and its
    stall clock in every read that shows it (one job, the list, the table's rows), while the kept
    record, and ``job`` that folds go on from, stay the fold of the event log; an ended job's file
    is not read."""
    from fsdp_orch.record.live_progress import write_live

    run_dir = tmp_path / "runs" / "j1"
    run_dir.mkdir(parents=True)
    running = JobStatus(id="j1", name="demo", cluster="local", kind="local", run_dir=str(run_dir),
                        created_at=1000.0, state="RUNNING", attempts=1, progress_step=10,
                        progress_attempt=0, stepped_at=1002.0, progress_at=1002.0)
    store.put(running, ["k"])
    write_live(str(run_dir), attempt=0, step=75, loss=1.5, loss_source="runtime",
               progress_at=1100.0)
    assert store.job_as_shown("j1").progress_step == 75
    assert store.job("j1").progress_step == 10  # what a fold goes on from: the log's
    assert [j.progress_step for j in store.jobs()] == [75]
    one = json.loads(store.status_json_bytes("j1", now=1101.0))
    assert one["progress"]["step"] == 75 and one["stalled_for_s"] is None  # stepped 1 s ago
    [listed] = json.loads(store.status_json_bytes(now=1101.0))
    assert listed == one
    [limited] = json.loads(store.status_json_bytes(limit=5, now=1101.0))
    assert limited == one
    kept = store.conn.execute("SELECT record FROM jobs WHERE id = 'j1'").fetchone()[0]
    assert json.loads(kept)["progress_step"] == 10  # the record is the fold of the log
    store.put(JobStatus(**{**running.__dict__, "state": "SUCCEEDED", "ended_at": 1200.0}), ["k2"])
    assert store.job_as_shown("j1").progress_step == 10
