"""The job store: schema version and migrations, WAL, file mode, the status JSON shape,
idempotency, terminal states, and many processes at once."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import stat
import traceback
from pathlib import Path

import pytest

from fsdp_orch.record.store import SCHEMA_VERSION, Store
from fsdp_orch.vocab.errors import FsdpOrchError
from fsdp_orch.vocab.states import JobState

JOB_KEYS = {"id", "name", "cluster", "state", "attempts", "restarts", "created_at", "ended_at",
            "last_checkpoint_step", "progress", "failures"}
FAILURE_KEYS = {"attempt", "category", "evidence", "detected_at", "stalled_for_s", "action"}


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    with Store(tmp_path / "home" / "jobs.db") as s:
        yield s


def new_job(store: Store, tmp_path: Path, **kwargs):  # type: ignore[no-untyped-def]
    return store.create_job(name=kwargs.pop("name", "demo"), cluster="local", spec_json="{}",
                            run_dir_root=tmp_path / "runs", **kwargs)


def test_schema_version_wal_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "home" / "jobs.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with Store(path) as s:
        new_job(s, tmp_path)
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


def test_migrates_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    path.touch()
    with Store(path) as s:
        job_id, created = new_job(s, tmp_path)
        assert created and s.job(job_id)["state"] == "PENDING"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"jobs", "failures", "attempts"} <= tables


def test_reopening_keeps_data_and_does_not_migrate_again(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with Store(path) as s:
        job_id, _ = new_job(s, tmp_path)
    with Store(path) as s:
        assert s.job(job_id) is not None


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    # The CLI turns FsdpOrchError into one line and exit 2; any other exception is a traceback.
    with pytest.raises(FsdpOrchError, match="newer") as info:
        Store(path)
    assert info.value.exit_code == 2


def test_status_json_shape(store: Store, tmp_path: Path) -> None:
    job_id, _ = new_job(store, tmp_path, name="shape", now=1_700_000_000.0)
    doc = json.loads(store.status_json(job_id) or "null")
    assert JOB_KEYS <= set(doc)
    assert (doc["id"], doc["name"], doc["cluster"], doc["state"]) == (job_id, "shape", "local", "PENDING")
    assert (doc["attempts"], doc["restarts"], doc["progress"], doc["failures"]) == (0, 0, None, [])
    assert doc["created_at"].startswith("2023-11-14T22:13:20") and doc["created_at"].endswith("Z")
    assert doc["ended_at"] is None and doc["last_checkpoint_step"] is None

    store.start_attempt(job_id, 0, resume_from=None, now=1_700_000_001.0)
    store.update(job_id, progress_step=42, progress_loss=2.5, progress_at=1_700_000_002.0,
                 last_checkpoint_step=40)
    store.add_failure(job_id, attempt=0, category="nccl_timeout", evidence="Watchdog caught collective",
                      action="restart", stalled_for_s=12.5, now=1_700_000_003.0)
    store.start_attempt(job_id, 1, resume_from="/ck/step-40", now=1_700_000_004.0)
    doc = json.loads(store.status_json(job_id) or "null")
    assert (doc["state"], doc["attempts"], doc["restarts"], doc["last_checkpoint_step"]) == ("RUNNING", 2, 1, 40)
    assert doc["progress"]["step"] == 42 and doc["progress"]["loss"] == 2.5
    (failure,) = doc["failures"]
    assert FAILURE_KEYS <= set(failure)
    assert (failure["attempt"], failure["category"], failure["action"], failure["stalled_for_s"]) == (
        0, "nccl_timeout", "restart", 12.5)
    assert failure["evidence"] == "Watchdog caught collective"
    assert "collective timed out" in failure["hint"]  # what the user can do about it

    assert store.set_state(job_id, JobState.SUCCEEDED, now=1_700_000_100.0)
    doc = json.loads(store.status_json(job_id) or "null")
    assert doc["state"] == "SUCCEEDED" and doc["ended_at"].startswith("2023-11-14T22:15:00")

    listing = json.loads(store.status_json() or "null")
    assert [j["id"] for j in listing] == [job_id]
    assert store.status_json("nope") is None


def test_status_list_is_oldest_first_and_limited(store: Store, tmp_path: Path) -> None:
    ids = [new_job(store, tmp_path, name=f"j{i}", now=1000.0 + i)[0] for i in range(5)]
    assert [j["id"] for j in json.loads(store.status_json() or "[]")] == ids
    assert [j["id"] for j in json.loads(store.status_json(limit=2) or "[]")] == ids[-2:]


@pytest.mark.parametrize("loss", [float("nan"), float("inf")])
def test_a_diverged_loss_does_not_break_the_store(store: Store, tmp_path: Path, loss: float) -> None:
    job_id, _ = new_job(store, tmp_path)
    store.update(job_id, progress_step=7, progress_loss=loss)
    doc = json.loads(store.status_json(job_id) or "null")
    assert doc["progress"]["step"] == 7
    assert doc["progress"]["loss"] is None


def test_values_are_parameters_not_sql(store: Store, tmp_path: Path) -> None:
    evil = "x'); DROP TABLE jobs; --"
    job_id, _ = new_job(store, tmp_path, name=evil, idempotency_key=evil)
    store.add_failure(job_id, attempt=0, category="unknown", evidence=evil, action="give_up")
    doc = json.loads(store.status_json(job_id) or "null")
    assert doc["name"] == evil and doc["failures"][0]["evidence"] == evil
    assert store.find_job_id(job_id[:4]) == job_id
    assert store.find_job_id("%") is None and store.find_job_id("_") is None


def test_update_refuses_unknown_columns(store: Store, tmp_path: Path) -> None:
    job_id, _ = new_job(store, tmp_path)
    with pytest.raises(ValueError, match="not updatable"):
        store.update(job_id, **{"state = 'X' --": 1})


def test_idempotency_key_returns_the_same_job(store: Store, tmp_path: Path) -> None:
    first, created = new_job(store, tmp_path, idempotency_key="k1")
    again, created_again = new_job(store, tmp_path, idempotency_key="k1")
    other, _ = new_job(store, tmp_path, idempotency_key="k2")
    assert created and not created_again and again == first and other != first
    assert len(json.loads(store.status_json() or "[]")) == 2


@pytest.mark.parametrize("final", [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED])
def test_terminal_states_are_final(store: Store, tmp_path: Path, final: JobState) -> None:
    job_id, _ = new_job(store, tmp_path)
    assert store.set_state(job_id, JobState.RUNNING)
    assert store.set_state(job_id, final, reason="done", now=5.0)
    for later in JobState:
        assert not store.set_state(job_id, later, reason="late", now=9.0)
    row = store.job(job_id)
    assert (row["state"], row["ended_at"], row["reason"]) == (final.value, 5.0, "done")
    assert final.is_terminal() and not JobState.RESTARTING.is_terminal()


def test_a_cancelled_job_is_not_restarted_by_a_late_attempt(store: Store, tmp_path: Path) -> None:
    job_id, _ = new_job(store, tmp_path)
    store.start_attempt(job_id, 0, resume_from=None)
    store.set_state(job_id, JobState.CANCELLED)
    store.start_attempt(job_id, 1, resume_from=None)  # a supervisor that lost the race
    assert store.job(job_id)["state"] == "CANCELLED"
    assert [a["attempt"] for a in store.attempts(job_id)] == [0]


# --- many processes at once ---------------------------------------------------------------------

WORKERS = 20
JOBS_EACH = 10


def _worker(path: str, runs: str, index: int, barrier, results) -> None:  # type: ignore[no-untyped-def]
    try:
        barrier.wait(timeout=60)
        ids = []
        with Store(Path(path)) as store:
            for i in range(JOBS_EACH):
                job_id, created = store.create_job(name=f"w{index}-{i}", cluster="local", spec_json="{}",
                                                   run_dir_root=Path(runs), idempotency_key=f"{index}-{i}")
                assert created
                ids.append(job_id)
                store.update(job_id, progress_step=i, progress_loss=1.0 / (i + 1))
                json.loads(store.status_json(job_id) or "null")
                json.loads(store.status_json() or "null")
            again, created = store.create_job(name="dup", cluster="local", spec_json="{}",
                                              run_dir_root=Path(runs), idempotency_key=f"{index}-0")
            assert not created and again == ids[0]
        results.put(("ok", index, ids))
    except BaseException:
        results.put(("error", index, traceback.format_exc()))


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-file", "migrated-file"])
def test_many_processes_lose_nothing(tmp_path: Path, fresh: bool) -> None:
    path = tmp_path / "home" / "jobs.db"
    if not fresh:
        Store(path).close()
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(path), str(tmp_path / "runs"), i, barrier, results))
             for i in range(WORKERS)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [o[2] for o in outcomes if o[0] == "error"]
    assert not errors, errors[0]
    created = sorted(i for o in outcomes for i in o[2])
    assert len(created) == len(set(created)) == WORKERS * JOBS_EACH
    with Store(path) as store:
        listed = json.loads(store.status_json() or "[]")
        assert sorted(j["id"] for j in listed) == created
        assert all(j["progress"] is not None for j in listed)


def test_a_version_2_store_migrates_and_keeps_its_failures(tmp_path: Path) -> None:
    """Failures recorded before hints existed keep a null hint; new ones get theirs."""
    from fsdp_orch.record.store import MIGRATIONS

    path = tmp_path / "jobs.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in [s for step in MIGRATIONS[:2] for s in step]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    conn.execute("INSERT INTO jobs (id, name, cluster, kind, state, created_at, spec_json, run_dir)"
                 " VALUES ('old', 'demo', 'local', 'local', 'RUNNING', 1.0, '{}', '/r/old')")
    conn.execute("INSERT INTO failures (job_id, attempt, category, evidence, detected_at, action)"
                 " VALUES ('old', 0, 'cuda_oom', 'CUDA out of memory', 2.0, 'restart')")
    conn.close()
    with Store(path) as store:
        store.add_failure("old", attempt=1, category="cuda_oom", evidence="CUDA out of memory",
                          action="give_up", now=3.0)
        old, new = json.loads(store.status_json("old") or "null")["failures"]
    assert (old["action"], old["hint"]) == ("restart", None)
    assert new["action"] == "give_up" and "offload_params" in new["hint"]
