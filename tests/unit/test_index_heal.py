"""The index heals itself (record/heal.py): a database SQLite cannot read, or that is not this
user's, is moved aside (never deleted) and rebuilt from the event logs with one notice; a missing,
empty or other-version one is rebuilt silently; a rebuild waits for the one lock; a stale -wal is
never replayed into a new database; and a runs folder is marked read only once its jobs are in."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from fsdp_orch.record import heal
from fsdp_orch.record.events import EventWriter
from fsdp_orch.record.index import JobIndex, open_index
from fsdp_orch.record.journal import Journal
from fsdp_orch.record.store import Store
from fsdp_orch.record.store_schema import SCHEMA_VERSION

JOBS = ["aaa111", "bbb222", "ccc333"]


def submit(runs: Path, job_id: str, name: str = "demo") -> None:
    run_dir = runs / job_id
    Journal(EventWriter(run_dir, "submit"), job_id).submitted(
        name=name, cluster="local", kind="local", spec_json="{}", run_dir=str(run_dir),
        job_file=None, spec_hash=None, idempotency_key=None)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("FSDP_ORCH_DB", raising=False)
    monkeypatch.chdir(tmp_path)  # ./clusters is a profile folder: none here
    home = tmp_path / "home"
    for job_id in JOBS:
        submit(home / "runs", job_id, name=f"n-{job_id}")
    return home


def listed(home: Path) -> list[str]:
    with open_index(str(home)) as index:
        index.ingest()
        return sorted(index.store.job_ids())


def notices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    said: list[str] = []
    monkeypatch.setattr(heal, "_print_notice", said.append)
    return said


def aside_files(home: Path) -> list[str]:
    return sorted(p.name for p in home.iterdir() if ".corrupt-" in p.name)


def test_garbage_is_moved_aside_intact_and_the_index_rebuilt(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said = notices(monkeypatch)
    assert listed(home) == JOBS and said == []
    garbage = os.urandom(8192)
    (home / "jobs.db").write_bytes(garbage)
    (home / "jobs.db-wal").write_bytes(b"wal garbage")
    assert listed(home) == JOBS
    assert (len(said) == 1 and str(home / "jobs.db") in said[0]
            and "not an SQLite database" in said[0])
    moved = aside_files(home)
    assert len(moved) == 2 and moved[1] == moved[0] + "-wal", moved
    assert moved[0] in said[0]
    assert ((home / moved[0]).read_bytes() == garbage
            and (home / moved[1]).read_bytes() == b"wal garbage")
    assert listed(home) == JOBS and len(said) == 1  # healed: no second notice


def test_a_header_that_lies_is_caught_by_sqlite(home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The magic and the version are right, the rest is not a database."""
    said = notices(monkeypatch)
    listed(home)
    header = bytearray((home / "jobs.db").read_bytes()[:100])
    header[16:18] = b"\x00\x03"  # a page size SQLite refuses
    (home / "jobs.db").write_bytes(bytes(header) + os.urandom(8192))
    assert listed(home) == JOBS and len(said) == 1 and "SQLite cannot read it" in said[0]


def test_a_database_writable_by_others_is_not_trusted(home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    said = notices(monkeypatch)
    listed(home)
    os.chmod(home / "jobs.db", 0o620)
    assert listed(home) == JOBS
    assert len(said) == 1 and "mode 620" in said[0] and len(aside_files(home)) == 1
    assert (home / "jobs.db").stat().st_mode & 0o777 == 0o600


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another uid needs root")
def test_a_database_of_another_owner_is_not_trusted(home: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    said = notices(monkeypatch)
    listed(home)
    os.chown(home / "jobs.db", 4242, 4242)
    assert listed(home) == JOBS
    assert len(said) == 1 and "uid 4242" in said[0]
    assert [(home / name).stat().st_uid for name in aside_files(home)] == [4242]


@pytest.mark.parametrize("how", ["missing", "empty", "another version"])
def test_a_missing_empty_or_other_version_index_is_rebuilt_without_a_notice(
        home: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    said = notices(monkeypatch)
    listed(home)
    db = home / "jobs.db"
    if how == "missing":
        db.unlink()
    elif how == "empty":
        db.write_bytes(b"")
    else:
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.close()
    before = db.stat().st_ino if db.exists() else None
    assert listed(home) == JOBS and said == [] and aside_files(home) == []
    assert db.stat().st_ino != before  # a new file took its place: nothing was rebuilt in it
    assert not (home / "jobs.db.rebuild").exists()


def test_a_stale_wal_is_not_replayed_into_the_new_database(home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``rm jobs.db`` leaves its -wal while a process still has it open: that log belongs to the
    deleted file, and SQLite would apply it to the rebuilt one."""
    notices(monkeypatch)
    other = home.parent / "other.db"
    with Store(other) as s:  # a live database with pages in its -wal
        s.conn.execute("PRAGMA wal_autocheckpoint = 0")
        for i in range(50):
            s.conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (f"k{i}" * 100, i))
        (home / "jobs.db-wal").write_bytes(Path(str(other) + "-wal").read_bytes())
    assert listed(home) == JOBS
    with Store(home / "jobs.db") as s:
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert s.meta("k0" * 100) is None


def test_a_rebuild_waits_for_the_lock(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notices(monkeypatch)
    fd = os.open(home / "jobs.db.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    got: list[list[str]] = []
    worker = threading.Thread(target=lambda: got.append(listed(home)))
    try:
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and not (home / "jobs.db").exists()
    finally:
        os.close(fd)
    worker.join(30)
    assert got == [JOBS]


def test_the_new_index_is_built_aside_and_takes_the_old_ones_place_whole(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the build runs, the database's own path holds the old file, untouched: whoever opens
    it meanwhile sees the old index (or, this one being of another version, waits for the lock)."""
    notices(monkeypatch)
    db = home / "jobs.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    conn.close()
    old = db.read_bytes()
    during: list[bool] = []

    def build(fresh: Store) -> None:
        during.append(db.read_bytes() == old)
        JobIndex(fresh, [str(home / "runs")]).ingest()
        during.append(db.read_bytes() == old and Path(str(fresh.path)).parent == home)

    with heal.open_store(str(db), build) as store:
        assert during == [True, True] and store.job_ids() == set(JOBS)


def test_a_runs_folder_is_marked_read_only_once_its_jobs_are_in(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    submit(runs, "done11")
    half = runs / "half22" / "events"
    half.mkdir(parents=True)
    line = (runs / "done11" / "events").iterdir().__next__().read_text().replace("done11", "half22")
    (half / "submit-x.jsonl").write_text(line[:-10])  # its writer is mid-line
    old = os.stat(runs).st_mtime_ns - 10**10
    os.utime(runs, ns=(old, old))
    key = f"runs_mtime_ns:{runs}"
    with JobIndex(Store(tmp_path / "jobs.db"), [str(runs)], warn=lambda text: None) as index:
        index.ingest()
        assert index.store.job_ids() == {"done11"} and index.store.meta(key) is None
        (half / "submit-x.jsonl").write_text(line)  # the runs folder's mtime does not change
        index.ingest()
        assert index.store.job_ids() == {"done11", "half22"} and index.store.meta(key) == old


def test_a_runs_folder_changed_within_the_clock_tick_is_looked_at_again(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    submit(runs, "done11")
    with JobIndex(Store(tmp_path / "jobs.db"), [str(runs)], warn=lambda text: None) as index:
        index.ingest()
        assert index.store.meta(f"runs_mtime_ns:{runs}") is None
