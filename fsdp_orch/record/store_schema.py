"""The index database's schema: its tables and indexes, its version, and how a database of another
version is dropped and made anew (a cache of the event logs: never migrated).

Kept to the standard library: ``fsdp-orch status`` imports this and must start fast.
"""

from __future__ import annotations

import os
import sqlite3
import time

from fsdp_orch.vocab.states import JobState

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from pathlib import Path

# 14: JobStatus.finished and .missing (what the script did after its last step), the loss's step;
# 13: each failure says whether its attempt made progress (the restart budget); 12: fit's
# estimate and the measured device peak (JobStatus.memory_json); 11:
# JobStatus.last_checkpoint_at (the metrics' checkpoint age); 10: the goodput breakdown and the
# facts it is computed from; 7: JobStatus.last_checkpoint_path and _note (checkpoint.file); 8:
# progress_attempt;
# 9: the loss's source, the hang window, stepped_at/stall_from (stalled_for_s filled in as status
# reads)
SCHEMA_VERSION = 14
BUSY_TIMEOUT_MS = 30_000
ACTIVE_STATES = tuple(s.value for s in (JobState.PENDING, JobState.RUNNING, JobState.RESTARTING))
# Written into the SQL text, not bound: SQLite uses the partial index jobs_active only when the
# query's WHERE is visibly the index's own.
ACTIVE = f"state IN {ACTIVE_STATES!r}"
# A row's status document as read at a time (bound twice: ?, ?): a stalled job's stalled_for_s is
# the seconds since its last step, as JobStatus.to_json(now) says (the kept doc has null there).
DOC_AT = ("CASE WHEN stall_from < ? THEN json_set(doc, '$.stalled_for_s',"
          " round(? - stepped_at, 1)) ELSE doc END")
MEMORY = ":memory:"  # an index built for one look, written nowhere

_SCHEMA = [
    """CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        state TEXT NOT NULL,
        ended_at REAL,
        kind TEXT NOT NULL,
        run_dir TEXT NOT NULL,
        idempotency_key TEXT,
        supervisor_pid INTEGER,
        backend_ref TEXT,
        record TEXT NOT NULL,   -- JobStatus.to_record(), JSON
        doc TEXT NOT NULL,      -- JobStatus.to_json(), JSON: what status --json prints
        last_key TEXT,          -- events.order_key of the last event folded in, JSON
        stepped_at REAL,        -- JobStatus.stepped_at: the running attempt's last step
        stall_from REAL         -- JobStatus.stall_from: from then on, without a step, it is stalled
    )""",
    "CREATE INDEX jobs_created ON jobs(created_at)",
    f"CREATE INDEX jobs_active ON jobs(state) WHERE {ACTIVE}",
    "CREATE INDEX jobs_ended ON jobs(ended_at)",
    "CREATE UNIQUE INDEX jobs_idem ON jobs(idempotency_key) WHERE idempotency_key IS NOT NULL",
    # How far each event log has been read into this index (byte offset, whole lines).
    "CREATE TABLE ingested (path TEXT PRIMARY KEY, offset INTEGER NOT NULL, line INTEGER NOT NULL)",
    # generation: bumped on every change of a status doc; names the cached copy of the full list.
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
]


class Transaction:
    """``with``: BEGIN IMMEDIATE, then COMMIT, or ROLLBACK on any exception (contextlib costs the
    status command milliseconds at start-up). BEGIN IMMEDIATE takes the write lock at once (no
    upgrade deadlock between writers)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        self.conn.execute("ROLLBACK" if kind is not None else "COMMIT")


def schema_is_current(conn: sqlite3.Connection) -> bool:
    """Whether the database has this version's schema (SQLite reads the file's header: raises
    ``sqlite3.DatabaseError`` on a file that is not a database)."""
    return bool(conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION)


def ensure_schema(conn: sqlite3.Connection, path: Path | str) -> None:
    """This version's schema in the database at ``path`` (made, or made anew), in WAL mode."""
    # Switching to WAL takes an exclusive lock and does not wait on the busy timeout: many
    # processes opening a new store at once retry here instead of failing "database is locked".
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return _ensure_schema_once(conn, path)
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _ensure_schema_once(conn: sqlite3.Connection, path: Path | str) -> None:
    if not schema_is_current(conn):
        _create_schema(conn, path)
    # WAL only once the schema is made: a new file's first transaction then goes to the file
    # itself, so its header (read by record.heal) names the schema version from the start.
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode = WAL")


def _create_schema(conn: sqlite3.Connection, path: Path | str) -> None:
    with Transaction(conn):
        if schema_is_current(conn):
            return  # another process made it while this one waited for the lock
        # Another version's cache (or none): drop it; the index reads every event log again.
        for kind, name in conn.execute(
                "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view')"
                " AND name NOT LIKE 'sqlite_%'").fetchall():
            conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
        for statement in _SCHEMA:
            conn.execute(statement)
        # Starts from the clock, not 0: a cached list of a dropped or
        # deleted index never matches.
        conn.execute("INSERT INTO meta (key, value) VALUES ('generation', ?)",
                     (time.time_ns() // 1000,))
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    if path != MEMORY:
        os.chmod(path, 0o600)
