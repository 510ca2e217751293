"""The index's database: SQLite under $FSDP_ORCH_HOME (WAL, parameterised SQL, mode 0600),
a cache of each job's ``JobStatus`` as ``record.fold`` computed it from the job's events.

Nothing here decides what a status is. A row holds the status document ``status --json`` prints
(so 10,000 jobs are one concatenation inside SQLite) and the full record fsdp-orch reads back. Since
every row can be computed again from the event logs, a database of another schema version is not
migrated: its tables are dropped and the index rebuilds them from the logs (the schema:
``record.store_schema``).

Kept to the standard library: ``fsdp-orch status`` imports this and must start fast.
"""

from __future__ import annotations

import os
import sqlite3
import time

from fsdp_orch.record.listing_cache import ListingCache, with_docs
from fsdp_orch.record.store_schema import (
    ACTIVE,
    BUSY_TIMEOUT_MS,
    DOC_AT,
    MEMORY,
    Transaction,
    ensure_schema,
    schema_is_current,
)
from fsdp_orch.vocab.errors import FsdpOrchError

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from fsdp_orch.record.status import JobStatus


def _dumps(value: object) -> str:
    import json

    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class IndexDamaged(FsdpOrchError):
    """The index holds what fsdp-orch never wrote (the event logs, which it caches, are intact)."""


class Store:
    """One open connection; pass it where it is needed (no global handle)."""

    def __init__(self, path: Path | str, create: bool = True):
        """``create``: make the file and its schema where they are missing, or drop and recreate the
        tables of another schema version, in place (a new database nobody else reads yet; the CLI
        goes through ``record.heal``, which builds a new index aside and swaps it in). False: open
        the file as it is (see ``schema_is_current``)."""
        self.path = path
        if create and path != MEMORY:
            os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
            if not os.path.exists(path):
                fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
                os.close(fd)
        self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                    check_same_thread=False)
        self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if create:
            ensure_schema(self.conn, self.path)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_is_current(self) -> bool:
        """Whether the database has this version's schema (SQLite reads the file's header: raises
        ``sqlite3.DatabaseError`` on a file that is not a database)."""
        return schema_is_current(self.conn)

    # --- writes ---------------------------------------------------------------------------

    def _transaction(self) -> Transaction:
        """A write transaction that takes the lock at once (no upgrade deadlock between writers)."""
        return Transaction(self.conn)

    def put(self, status: JobStatus, last_key: object = None,
            ingested: list[tuple[str, int, int]] = (),  # type: ignore[assignment]
            expected_last_key: object = ...) -> bool | None:
        """Keep ``status`` (folded up to the event at ``last_key``) and how far each event log was
        read, in one transaction. False, and nothing kept, when another job already holds its
        idempotency key (a concurrent submit with the same key won). None, and nothing kept, when
        ``expected_last_key`` is given and the job's kept status has moved on from it since it was
        read (another process folded more): the caller reads again."""
        record, doc = _dumps(status.to_record()), _dumps(status.to_json())
        with self._transaction():
            if expected_last_key is not ...:
                row = self.conn.execute("SELECT last_key FROM jobs WHERE id = ?",
                                        (status.id,)).fetchone()
                current = None if row is None or row[0] is None else _loads(row[0])
                if current != expected_last_key:
                    return None
            if status.idempotency_key:
                row = self.conn.execute("SELECT id FROM jobs WHERE idempotency_key = ?",
                                        (status.idempotency_key,)).fetchone()
                if row and row[0] != status.id:
                    return False
            self.conn.execute(
                "INSERT INTO jobs (id, created_at, state, ended_at, kind, run_dir, idempotency_key,"
                " supervisor_pid, backend_ref, record, doc, last_key, stepped_at, stall_from)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET state = excluded.state,"
                " ended_at = excluded.ended_at, supervisor_pid = excluded.supervisor_pid,"
                " backend_ref = excluded.backend_ref, record = excluded.record, doc = excluded.doc,"
                " last_key = excluded.last_key, stepped_at = excluded.stepped_at,"
                " stall_from = excluded.stall_from",
                (status.id, status.created_at, status.state, status.ended_at, status.kind,
                 status.run_dir, status.idempotency_key, status.supervisor_pid, status.backend_ref,
                 record, doc, None if last_key is None else _dumps(last_key), status.stepped_at,
                 status.stall_from))
            self.conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
            self._set_ingested(ingested)
        return True

    def set_ingested_many(self, ingested: list[tuple[str, int, int]]) -> None:
        """(path, byte offset, lines) of event logs read that changed no status."""
        with self._transaction():
            self._set_ingested(ingested)

    def _set_ingested(self, ingested: list[tuple[str, int, int]]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO ingested (path, offset, line) VALUES (?, ?, ?)", ingested)

    def set_meta(self, key: str, value: int) -> None:
        with self._transaction():
            self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                              (key, value))

    def set_meta_text(self, key: str, value: str) -> None:
        """Text in the meta table (its INTEGER column keeps text that is not a number as text)."""
        with self._transaction():
            self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                              (key, value))

    # --- reads ----------------------------------------------------------------------------

    def ingested(self, path: str) -> tuple[int, int]:
        """(byte offset, lines) up to which the event log at ``path`` is in the index."""
        row = self.conn.execute("SELECT offset, line FROM ingested WHERE path = ?",
                                (path,)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def meta(self, key: str) -> int | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else None

    def meta_text(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def job_for_key(self, idempotency_key: str) -> str | None:
        row = self.conn.execute("SELECT id FROM jobs WHERE idempotency_key = ?",
                                (idempotency_key,)).fetchone()
        return row[0] if row else None

    def job_ids(self) -> set[str]:
        return {row[0] for row in self.conn.execute("SELECT id FROM jobs")}

    def has_job(self, job_id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM jobs WHERE id = ?",
                                 (job_id,)).fetchone() is not None

    def job(self, job_id: str) -> JobStatus | None:
        """The job's status as last folded, with everything fsdp-orch reads of it."""
        row = self.conn.execute("SELECT record FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else _status(row[0])

    def job_as_shown(self, job_id: str) -> JobStatus | None:
        """``job``, with a running job's step as its supervisor last saw it (``with_live``): for
        showing only; a status folded further or kept starts from ``job``."""
        status = self.job(job_id)
        return None if status is None else with_live(status)

    def last_key(self, job_id: str) -> list[Any] | None:
        """``events.order_key`` of the last event folded into the job's status (JSON: a list)."""
        import json

        row = self.conn.execute("SELECT last_key FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None or row[0] is None else json.loads(row[0])

    def jobs(self, limit: int | None = None) -> list[JobStatus]:
        """Every job (``limit``: the newest that many), oldest first, as shown (``with_live``):
        the table's rows."""
        rows = self.conn.execute("SELECT record FROM (SELECT record, created_at,"
                                 " rowid AS r FROM jobs ORDER BY created_at DESC,"
                                 " rowid DESC LIMIT ?) ORDER BY created_at, r",
                                 (-1 if limit is None else int(limit),)).fetchall()
        return [with_live(_status(row[0])) for row in rows]

    def active_jobs(self) -> list[JobStatus]:
        """Jobs not yet in a terminal state (what a liveness refresh has to look at)."""
        rows = self.conn.execute(f"SELECT record FROM jobs WHERE {ACTIVE}"
                                 " ORDER BY created_at, rowid").fetchall()
        return [_status(row[0]) for row in rows]

    def active_refs(self) -> list[ActiveJob]:
        """The active jobs' ids, kinds and what was started for them: what ``status`` looks at
        before it decides whether any kind has to settle a job (without reading a whole record)."""
        rows = self.conn.execute("SELECT id, kind, supervisor_pid, backend_ref FROM jobs"
                                 f" WHERE {ACTIVE} ORDER BY created_at, rowid").fetchall()
        return [ActiveJob(*row) for row in rows]

    def folders_to_read(self, ended_since: float) -> dict[str, str]:
        """Job id -> run folder of the jobs whose logs may still grow: the active ones, and those
        that ended after ``ended_since`` (a supervisor still writes
        its last events after a cancel)."""
        rows = self.conn.execute(f"SELECT id, run_dir FROM jobs WHERE {ACTIVE} UNION ALL"
                                 " SELECT id, run_dir FROM jobs WHERE ended_at >= ?",
                                 (ended_since,)).fetchall()
        return {row[0]: row[1] for row in rows}

    def run_dir(self, job_id: str) -> str | None:
        row = self.conn.execute("SELECT run_dir FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else str(row[0])

    def find_job_id(self, prefix: str) -> str | None:
        """Exact id, or a unique prefix of one (like git)."""
        if not prefix:
            return None  # the empty prefix matches every id: it never names a job
        rows = self.conn.execute("SELECT id FROM jobs WHERE id = ? OR id LIKE ? ESCAPE '\\'"
                                 " LIMIT 3",
                                 (prefix, prefix.replace("\\", "\\\\").replace("%", "\\%")
                                  .replace("_", "\\_") + "%")).fetchall()
        ids = {r[0] for r in rows}
        if prefix in ids:
            return prefix
        return rows[0][0] if len(rows) == 1 else None

    def status_json(self, job_id: str | None = None, limit: int | None = None,
                    now: float | None = None) -> str | None:
        """``status --json`` text: a list of all jobs (oldest first),
        or one object; None if unknown."""
        data = self.status_json_bytes(job_id, limit, now)
        return None if data is None else data.decode()

    def status_json_bytes(self, job_id: str | None = None, limit: int | None = None,
                          now: float | None = None) -> bytes | None:
        """As status_json, as UTF-8 bytes straight from SQLite (no decode/encode of megabytes).
        ``stalled_for_s`` is filled in for the time of reading (``now``, default the clock's):
        ``JobStatus.to_json(now)``."""
        now = time.time() if now is None else now
        if job_id is not None:
            row = self.conn.execute(f"SELECT CAST({DOC_AT} AS BLOB) FROM jobs WHERE id = ?",
                                    (now, now, job_id)).fetchone()
            if row is None:
                return None
            return with_docs(bytes(row[0]), self._live_docs(now, job_id=job_id))
        if limit is not None:
            row = self.conn.execute(
                "SELECT CAST('[' || coalesce(group_concat(doc, ','), '') || ']' AS BLOB) FROM"
                f" (SELECT doc, created_at, r FROM (SELECT {DOC_AT} AS doc, created_at, rowid AS r"
                " FROM jobs ORDER BY created_at DESC, rowid DESC LIMIT ?) ORDER BY created_at, r)",
                (now, now, int(limit))).fetchone()
            return with_docs(bytes(row[0]), self._live_docs(now))
        return self._all_docs_cached(now)

    def _live_docs(self, now: float, *, job_id: str | None = None,
                   as_kept: bool = False) -> list[tuple[bytes, bytes]]:
        """(document as read at ``now``, or ``as_kept``, document with the live step) for each
        running job whose supervisor's live file is ahead of its event log (``with_live``)."""
        from fsdp_orch.record.live_progress import apply_live, read_live

        column = "doc" if as_kept else DOC_AT
        where, args = ("AND id = ?", (job_id,)) if job_id else ("", ())
        if not as_kept:
            args = (now, now, *args)
        # {ACTIVE} first: without it SQLite scans every row (10 ms in 10,000 jobs), not jobs_active
        rows = self.conn.execute(f"SELECT CAST({column} AS BLOB), record, run_dir FROM jobs"
                                 f" WHERE {ACTIVE} AND state = 'RUNNING' {where}",
                                 args).fetchall()
        out = []
        for doc, record, run_dir in rows:
            live = read_live(run_dir)
            if live is None:
                continue  # the common case: no record parsed
            status = _status(record)
            if apply_live(status, live):
                out.append((bytes(doc), _dumps(status.to_json(now)).encode()))
        return out

    def _all_docs_cached(self, now: float) -> bytes:
        """The full list, from the listing cache when nothing changed since it was written (status
        in a polling pipeline), else built by SQLite and cached; the documents of the running jobs
        stalled at ``now`` are then put in for the kept ones (a few, and among the newest)."""
        cache = ListingCache(os.path.join(os.path.dirname(self.path) or ".", "cache"))
        self.conn.execute("BEGIN")
        try:
            stalled = self.conn.execute(f"SELECT CAST(doc AS BLOB), CAST({DOC_AT} AS BLOB)"
                                        f" FROM jobs WHERE {ACTIVE} AND stall_from < ?",
                                        (now, now, now)).fetchall()
            generation = self.conn.execute(
                "SELECT value FROM meta WHERE key = 'generation'").fetchone()[0]
            kept = cache.read(generation)
            live = self._live_docs(now, as_kept=True)
            stalled = _without_live(stalled, live)
            if kept is not None:
                return with_docs(kept, stalled + live)
            row = self.conn.execute(
                "SELECT CAST('[' || coalesce(group_concat(doc, ','), '') || ']' AS BLOB)"
                " FROM (SELECT doc FROM jobs ORDER BY created_at, rowid)").fetchone()
        finally:
            self.conn.execute("COMMIT")
        data = bytes(row[0])
        if self.path != MEMORY:
            cache.write(generation, data)
        return with_docs(data, stalled + live)


class ActiveJob:
    """An active job as ``active_refs`` gives it (no dataclass: ``status`` starts here)."""

    __slots__ = ("id", "kind", "supervisor_pid", "backend_ref")

    def __init__(self, id: str, kind: str, supervisor_pid: int | None, backend_ref: str | None):
        self.id, self.kind, self.supervisor_pid, self.backend_ref = (
            id, kind, supervisor_pid, backend_ref)


def _loads(text: str) -> Any:
    import json

    return json.loads(text)


def with_live(status: JobStatus) -> JobStatus:
    """``status`` with its running attempt's step as the supervisor last saw it
    (``record.live_progress``): applied at each read, never kept, so the index stays the fold of
    the event log."""
    if status.running:
        from fsdp_orch.record.live_progress import apply_live, read_live

        apply_live(status, read_live(status.run_dir))
    return status


def _without_live(stalled: list[tuple[bytes, bytes]],
                  live: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The stalled documents, less those of jobs the live step replaces (one replacement each)."""
    if not live:
        return stalled
    kept_live = {kept for kept, _ in live}
    return [pair for pair in stalled if pair[0] not in kept_live]


def _status(record: str) -> JobStatus:
    import json

    from fsdp_orch.record.status import JobStatus

    try:
        doc = json.loads(record)
        if isinstance(doc, dict):
            return JobStatus.from_record(doc)
    except (ValueError, TypeError, KeyError, AttributeError):
        pass
    raise IndexDamaged(f"a job's record in the index is not one fsdp-orch wrote ({record[:60]!r}): "
                       "remove the index file (jobs.db, with its -wal and -shm); the next command "
                       "builds it again from the jobs' event logs")
