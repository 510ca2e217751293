"""The job store: SQLite under $FSDP_ORCH_HOME (WAL, parameterised SQL, mode 0600, versioned schema).

Kept to the standard library: ``fsdp-orch status`` imports only this and must start fast. The JSON that
``status --json`` prints is built by SQLite itself in one query, so 10,000 jobs cost one statement.
"""

from __future__ import annotations

import os
import sqlite3
import time

from fsdp_orch.vocab.states import TERMINAL_NAMES, JobState

TYPE_CHECKING = False  # typing itself costs milliseconds at start-up
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

SCHEMA_VERSION = 5
BUSY_TIMEOUT_MS = 30_000

# Each entry migrates from version i to i+1; never edit a shipped one, append a new one.
_ISO = "strftime('%Y-%m-%dT%H:%M:%fZ', {col}, 'unixepoch')"
_JOB_JSON_V1 = f"""json_object(
    'id', j.id, 'name', j.name, 'cluster', j.cluster, 'state', j.state,
    'attempts', j.attempts, 'restarts', j.restarts,
    'created_at', {_ISO.format(col='j.created_at')}, 'ended_at', {_ISO.format(col='j.ended_at')},
    'last_checkpoint_step', j.last_checkpoint_step,
    'progress', CASE WHEN j.progress_step IS NULL THEN NULL ELSE json_object(
        'step', j.progress_step, 'loss', json(j.progress_loss),
        'updated_at', {_ISO.format(col='j.progress_at')}) END,
    'failures', (SELECT json_group_array(json_object(
        'attempt', f.attempt, 'category', f.category, 'evidence', f.evidence,
        'detected_at', {_ISO.format(col='f.detected_at')}, 'stalled_for_s', f.stalled_for_s,
        'action', f.action)) FROM (SELECT * FROM failures WHERE job_id = j.id
                                   ORDER BY detected_at) AS f),
    'reason', j.reason, 'run_dir', j.run_dir)"""
# v2: whether hang detection is on (and why not), and the job's events (checkpoints moved aside,
# stack dumps taken).
_JOB_JSON_V2 = _JOB_JSON_V1[:-len(")")] + f""",
    'hang_detection', json_object('enabled', json(CASE WHEN j.hang_detection_off IS NULL
                                                       THEN 'true' ELSE 'false' END),
                                  'reason', j.hang_detection_off),
    'events', (SELECT json_group_array(json_object(
        'attempt', e.attempt, 'at', {_ISO.format(col='e.at')}, 'kind', e.kind,
        'message', e.message)) FROM (SELECT * FROM events WHERE job_id = j.id
                                     ORDER BY at) AS e))"""
# v3: each failure carries a hint (what the user can do about it).
_JOB_JSON_V3 = _JOB_JSON_V2.replace("'action', f.action)", "'action', f.action, 'hint', f.hint)")
assert _JOB_JSON_V3 != _JOB_JSON_V2
# v5: where the job came from, fixed at submit (the schedule and tick that submitted it, the
# checkpoint it was initialised from): a JSON object, or null.
_JOB_JSON = _JOB_JSON_V3[:-len(")")] + """,
    'origin', json(j.origin))"""


_DOC_COLUMNS_V1 = ("name, cluster, state, attempts, restarts, created_at, ended_at, last_checkpoint_step,"
                   " progress_step, progress_loss, progress_at, reason, run_dir")
_DOC_COLUMNS = _DOC_COLUMNS_V1 + ", hang_detection_off"


def _refresh_doc(id_expr: str, doc: str = _JOB_JSON) -> str:
    return (f"INSERT OR REPLACE INTO job_docs (job_id, created_at, doc) SELECT j.id, j.created_at,"
            f" {doc} FROM jobs j WHERE j.id = {id_expr};")


MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            cluster TEXT NOT NULL,
            kind TEXT NOT NULL DEFAULT 'local',
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            restarts INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            ended_at REAL,
            last_checkpoint_step INTEGER,
            progress_step INTEGER,
            progress_loss TEXT,
            progress_at REAL,
            reason TEXT,
            idempotency_key TEXT,
            spec_hash TEXT,
            spec_json TEXT NOT NULL,
            job_file TEXT,
            run_dir TEXT NOT NULL,
            supervisor_pid INTEGER,
            backend_ref TEXT
        )""",
        "CREATE INDEX jobs_created ON jobs(created_at)",
        "CREATE INDEX jobs_name ON jobs(name, created_at)",
        "CREATE INDEX jobs_active ON jobs(state) WHERE state IN ('PENDING', 'RUNNING', 'RESTARTING')",
        "CREATE UNIQUE INDEX jobs_idem ON jobs(idempotency_key) WHERE idempotency_key IS NOT NULL",
        """CREATE TABLE failures (
            job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
            attempt INTEGER NOT NULL,
            category TEXT NOT NULL,
            evidence TEXT,
            detected_at REAL NOT NULL,
            stalled_for_s REAL,
            action TEXT NOT NULL
        )""",
        "CREATE INDEX failures_job ON failures(job_id, detected_at)",
        """CREATE TABLE attempts (
            job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
            attempt INTEGER NOT NULL,
            started_at REAL NOT NULL,
            ended_at REAL,
            exit_code INTEGER,
            first_step_at REAL,
            resume_from TEXT,
            backend_ref TEXT,
            PRIMARY KEY (job_id, attempt)
        )""",
        # Each job's status JSON is kept ready in a narrow table of its own, so `status --json` over
        # 10,000 jobs is one concatenation inside SQLite rather than 10,000 JSON constructions.
        """CREATE TABLE job_docs (
            job_id TEXT PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
            created_at REAL NOT NULL,
            doc TEXT NOT NULL
        )""",
        "CREATE INDEX job_docs_created ON job_docs(created_at)",
        # Bumped on every change of any status doc: names the cached copy of the full list.
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        "INSERT INTO meta (key, value) VALUES ('generation', 0)",
        "CREATE TRIGGER job_docs_generation AFTER INSERT ON job_docs BEGIN"
        " UPDATE meta SET value = value + 1 WHERE key = 'generation'; END",
        f"CREATE TRIGGER jobs_doc_insert AFTER INSERT ON jobs BEGIN {_refresh_doc('NEW.id', _JOB_JSON_V1)} END",
        f"CREATE TRIGGER jobs_doc_update AFTER UPDATE OF {_DOC_COLUMNS_V1} ON jobs BEGIN"
        f" {_refresh_doc('NEW.id', _JOB_JSON_V1)} END",
        f"CREATE TRIGGER failures_doc AFTER INSERT ON failures BEGIN"
        f" {_refresh_doc('NEW.job_id', _JOB_JSON_V1)} END",
    ],
    [
        "ALTER TABLE jobs ADD COLUMN hang_detection_off TEXT",
        """CREATE TABLE events (
            job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
            attempt INTEGER,
            at REAL NOT NULL,
            kind TEXT NOT NULL,
            message TEXT NOT NULL
        )""",
        "CREATE INDEX events_job ON events(job_id, at)",
        "DROP TRIGGER jobs_doc_insert",
        "DROP TRIGGER jobs_doc_update",
        "DROP TRIGGER failures_doc",
        f"CREATE TRIGGER jobs_doc_insert AFTER INSERT ON jobs BEGIN {_refresh_doc('NEW.id', _JOB_JSON_V2)} END",
        f"CREATE TRIGGER jobs_doc_update AFTER UPDATE OF {_DOC_COLUMNS} ON jobs BEGIN"
        f" {_refresh_doc('NEW.id', _JOB_JSON_V2)} END",
        f"CREATE TRIGGER failures_doc AFTER INSERT ON failures BEGIN {_refresh_doc('NEW.job_id', _JOB_JSON_V2)} END",
        f"CREATE TRIGGER events_doc AFTER INSERT ON events BEGIN {_refresh_doc('NEW.job_id', _JOB_JSON_V2)} END",
        "INSERT OR REPLACE INTO job_docs (job_id, created_at, doc) SELECT j.id, j.created_at,"
        f" {_JOB_JSON_V2} FROM jobs j",
    ],
    [
        "ALTER TABLE failures ADD COLUMN hint TEXT",
        "DROP TRIGGER jobs_doc_insert",
        "DROP TRIGGER jobs_doc_update",
        "DROP TRIGGER failures_doc",
        "DROP TRIGGER events_doc",
        f"CREATE TRIGGER jobs_doc_insert AFTER INSERT ON jobs BEGIN {_refresh_doc('NEW.id', _JOB_JSON_V3)} END",
        f"CREATE TRIGGER jobs_doc_update AFTER UPDATE OF {_DOC_COLUMNS} ON jobs BEGIN"
        f" {_refresh_doc('NEW.id', _JOB_JSON_V3)} END",
        f"CREATE TRIGGER failures_doc AFTER INSERT ON failures BEGIN {_refresh_doc('NEW.job_id', _JOB_JSON_V3)} END",
        f"CREATE TRIGGER events_doc AFTER INSERT ON events BEGIN {_refresh_doc('NEW.job_id', _JOB_JSON_V3)} END",
        "INSERT OR REPLACE INTO job_docs (job_id, created_at, doc) SELECT j.id, j.created_at,"
        f" {_JOB_JSON_V3} FROM jobs j",
    ],
    [
        # How far each event log has been read into this index (byte offset, whole lines).
        "CREATE TABLE ingested (path TEXT PRIMARY KEY, offset INTEGER NOT NULL, line INTEGER NOT NULL)",
    ],
    [
        "ALTER TABLE jobs ADD COLUMN origin TEXT",
        "DROP TRIGGER jobs_doc_insert",
        "DROP TRIGGER jobs_doc_update",
        "DROP TRIGGER failures_doc",
        "DROP TRIGGER events_doc",
        f"CREATE TRIGGER jobs_doc_insert AFTER INSERT ON jobs BEGIN {_refresh_doc('NEW.id')} END",
        f"CREATE TRIGGER jobs_doc_update AFTER UPDATE OF {_DOC_COLUMNS} ON jobs BEGIN"
        f" {_refresh_doc('NEW.id')} END",
        f"CREATE TRIGGER failures_doc AFTER INSERT ON failures BEGIN {_refresh_doc('NEW.job_id')} END",
        f"CREATE TRIGGER events_doc AFTER INSERT ON events BEGIN {_refresh_doc('NEW.job_id')} END",
        "INSERT OR REPLACE INTO job_docs (job_id, created_at, doc) SELECT j.id, j.created_at,"
        f" {_JOB_JSON} FROM jobs j",
    ],
]

def _json_or_none(value: dict[str, Any] | None) -> str | None:
    import json

    return None if not value else json.dumps(value, sort_keys=True)


class _Transaction:
    """``with``: BEGIN IMMEDIATE, then COMMIT, or ROLLBACK on any exception (contextlib costs the
    status command milliseconds at start-up)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        self.conn.execute("ROLLBACK" if kind is not None else "COMMIT")


class Store:
    """One open connection; pass it where it is needed (no global handle)."""

    def __init__(self, path: Path):
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        if not os.path.exists(path):
            fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
        self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                    check_same_thread=False)
        self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- schema ---------------------------------------------------------------------------

    def _migrate(self) -> None:
        # Switching to WAL takes an exclusive lock and does not wait on the busy timeout: many
        # processes opening a new store at once retry here instead of failing "database is locked".
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                return self._migrate_once()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def _migrate_once(self) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            from fsdp_orch.vocab.errors import InputError

            raise InputError(f"schema version {version} is newer than this fsdp-orch understands "
                             f"({SCHEMA_VERSION}); upgrade fsdp-orch", file=str(self.path))
        if self.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self.conn.execute("PRAGMA journal_mode = WAL")
        with self._transaction():
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]  # re-read under lock
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step]:
                    self.conn.execute(statement)
            self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        os.chmod(self.path, 0o600)

    # --- writes ---------------------------------------------------------------------------

    def _transaction(self) -> _Transaction:
        """A write transaction that takes the lock at once (no upgrade deadlock between writers)."""
        return _Transaction(self.conn)

    def _write(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> sqlite3.Cursor:
        with self._transaction():
            return self.conn.execute(sql, params)

    def create_job(self, *, name: str, cluster: str, spec_json: str, run_dir_root: Path,
                   kind: str = "local",
                   job_file: str | None = None, spec_hash: str | None = None,
                   idempotency_key: str | None = None, job_id: str | None = None,
                   origin: dict[str, Any] | None = None, now: float | None = None) -> tuple[str, bool]:
        """Insert a PENDING job. Returns (id, created); with an idempotency key already used, (that id, False)."""
        with self._transaction():
            if idempotency_key:
                row = self.conn.execute("SELECT id FROM jobs WHERE idempotency_key = ?",
                                        (idempotency_key,)).fetchone()
                if row:
                    return row[0], False
            new_id = job_id or os.urandom(6).hex()
            self.conn.execute(
                "INSERT INTO jobs (id, name, cluster, kind, state, created_at, spec_json, job_file,"
                " spec_hash, idempotency_key, run_dir, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (new_id, name, cluster, kind, JobState.PENDING.value, now if now is not None else time.time(),
                 spec_json, job_file, spec_hash, idempotency_key, os.path.join(run_dir_root, new_id),
                 _json_or_none(origin)))
            return new_id, True

    _UPDATABLE = frozenset({"state", "attempts", "restarts", "ended_at", "last_checkpoint_step",
                            "progress_step", "progress_loss", "progress_at", "reason",
                            "supervisor_pid", "backend_ref", "hang_detection_off"})

    def update(self, job_id: str, **fields: Any) -> None:
        bad = set(fields) - self._UPDATABLE
        if bad:
            raise ValueError(f"not updatable: {sorted(bad)}")
        if "state" in fields and isinstance(fields["state"], JobState):
            fields["state"] = fields["state"].value
        if "progress_loss" in fields and fields["progress_loss"] is not None:
            loss = float(fields["progress_loss"])
            # JSON has no NaN or infinity: a diverged loss shows as null.
            fields["progress_loss"] = repr(loss) if loss == loss and abs(loss) != float("inf") else None
        assignments = ", ".join(f"{name} = :{name}" for name in sorted(fields))
        self._write(f"UPDATE jobs SET {assignments} WHERE id = :_id", {**fields, "_id": job_id})

    def set_state(self, job_id: str, state: JobState, *, reason: str | None = None,
                  now: float | None = None, only_if_active: bool = True) -> bool:
        """Move to ``state``; a terminal state is final (returns False if the job already ended).
        A success clears the reason a restart left behind; other states keep it unless given one."""
        ended = (now if now is not None else time.time()) if state.is_terminal() else None
        if state is JobState.SUCCEEDED:
            sql, params = "UPDATE jobs SET state = ?, ended_at = ?, reason = ? WHERE id = ?", [
                state.value, ended, reason, job_id]
        else:
            sql, params = ("UPDATE jobs SET state = ?, ended_at = ?, reason = COALESCE(?, reason)"
                           " WHERE id = ?", [state.value, ended, reason, job_id])
        if only_if_active:
            sql += f" AND state NOT IN ({', '.join('?' * len(TERMINAL_NAMES))})"
            params += TERMINAL_NAMES
        cur = self._write(sql, tuple(params))
        return cur.rowcount == 1

    def add_failure(self, job_id: str, *, attempt: int, category: str, evidence: str | None,
                    action: str, stalled_for_s: float | None = None, now: float | None = None) -> None:
        from fsdp_orch.vocab.hints import hint_for

        self._write("INSERT INTO failures (job_id, attempt, category, evidence, detected_at,"
                    " stalled_for_s, action, hint) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (job_id, attempt, category, evidence, now if now is not None else time.time(),
                     stalled_for_s, action, hint_for(category, evidence)))

    def add_event(self, job_id: str, *, attempt: int | None, kind: str, message: str,
                  now: float | None = None) -> None:
        """Something the supervisor did or saw that is not a failure (a checkpoint moved aside)."""
        self._write("INSERT INTO events (job_id, attempt, at, kind, message) VALUES (?, ?, ?, ?, ?)",
                    (job_id, attempt, now if now is not None else time.time(), kind, message))

    def start_attempt(self, job_id: str, attempt: int, *, resume_from: str | None,
                      now: float | None = None) -> None:
        t = now if now is not None else time.time()
        with self._transaction():
            cur = self.conn.execute(
                "UPDATE jobs SET attempts = ?, restarts = ?, state = ? WHERE id = ? AND state NOT IN"
                f" ({', '.join('?' * len(TERMINAL_NAMES))})",
                (attempt + 1, attempt, JobState.RUNNING.value, job_id, *TERMINAL_NAMES))
            if cur.rowcount == 1:  # a job that already ended (cancelled in a race) stays ended
                self.conn.execute("INSERT OR REPLACE INTO attempts (job_id, attempt, started_at, resume_from)"
                                  " VALUES (?, ?, ?, ?)", (job_id, attempt, t, resume_from))

    def first_step(self, job_id: str, attempt: int, when: float) -> None:
        """When the attempt's first training step was seen (recovery time is measured to here)."""
        self._write("UPDATE attempts SET first_step_at = ? WHERE job_id = ? AND attempt = ?"
                    " AND first_step_at IS NULL", (when, job_id, attempt))

    def end_attempt(self, job_id: str, attempt: int, exit_code: int | None,
                    now: float | None = None) -> None:
        self._write("UPDATE attempts SET ended_at = ?, exit_code = ? WHERE job_id = ? AND attempt = ?",
                    (now if now is not None else time.time(), exit_code, job_id, attempt))

    def set_ingested(self, path: str, offset: int, line: int) -> None:
        self._write("INSERT OR REPLACE INTO ingested (path, offset, line) VALUES (?, ?, ?)", (path, offset, line))

    def set_meta(self, key: str, value: int) -> None:
        self._write("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def set_meta_text(self, key: str, value: str) -> None:
        """Text in the meta table (its INTEGER column keeps text that is not a number as text)."""
        self._write("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # --- reads ----------------------------------------------------------------------------

    def ingested(self, path: str) -> tuple[int, int]:
        """(byte offset, lines) up to which the event log at ``path`` is in the index."""
        row = self.conn.execute("SELECT offset, line FROM ingested WHERE path = ?", (path,)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def meta(self, key: str) -> int | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else None

    def meta_text(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def job_for_key(self, idempotency_key: str) -> str | None:
        row = self.conn.execute("SELECT id FROM jobs WHERE idempotency_key = ?", (idempotency_key,)).fetchone()
        return row[0] if row else None

    def job_ids(self) -> set[str]:
        return {row[0] for row in self.conn.execute("SELECT id FROM jobs")}


    def status_json(self, job_id: str | None = None, limit: int | None = None) -> str | None:
        """``status --json`` text: a list of all jobs (oldest first), or one object; None if unknown."""
        data = self.status_json_bytes(job_id, limit)
        return None if data is None else data.decode()

    def status_json_bytes(self, job_id: str | None = None, limit: int | None = None) -> bytes | None:
        """As status_json, as UTF-8 bytes straight from SQLite (no decode/encode of megabytes)."""
        if job_id is not None:
            row = self.conn.execute("SELECT CAST(doc AS BLOB) FROM job_docs WHERE job_id = ?",
                                    (job_id,)).fetchone()
            return bytes(row[0]) if row else None
        if limit is not None:
            row = self.conn.execute(
                "SELECT CAST('[' || coalesce(group_concat(doc, ','), '') || ']' AS BLOB) FROM"
                " (SELECT doc, created_at, r FROM (SELECT doc, created_at, rowid AS r FROM job_docs"
                " ORDER BY created_at DESC, rowid DESC LIMIT ?) ORDER BY created_at, r)",
                (int(limit),)).fetchone()
            return bytes(row[0])
        return self._all_docs_cached()

    def _all_docs_cached(self) -> bytes:
        """The full list, from a file named after the store's generation when nothing changed since
        it was written (status in a polling pipeline), else built by SQLite and cached."""
        self.conn.execute("BEGIN")
        try:
            generation = self.conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0]
            cache = os.path.join(os.path.dirname(self.path) or ".", "cache", f"status-{generation}.json")
            try:
                with open(cache, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                pass
            row = self.conn.execute(
                "SELECT CAST('[' || coalesce(group_concat(doc, ','), '') || ']' AS BLOB)"
                " FROM (SELECT doc FROM job_docs ORDER BY created_at, rowid)").fetchone()
        finally:
            self.conn.execute("COMMIT")
        data = bytes(row[0])
        self._write_cache(cache, data)
        return data

    @staticmethod
    def _write_cache(path: str, data: bytes) -> None:
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            keep = os.path.basename(path)
            for name in os.listdir(directory):
                if name.startswith("status-") and name != keep and not name.endswith(".tmp"):
                    try:
                        os.unlink(os.path.join(directory, name))
                    except FileNotFoundError:
                        pass
        except OSError:
            pass  # a cache that cannot be written only costs speed

    def _dicts(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, params)
        names = [c[0] for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def active_jobs(self) -> list[dict[str, Any]]:
        """Jobs not yet in a terminal state (what a liveness refresh has to look at)."""
        return self._dicts("SELECT id, kind, state, supervisor_pid, backend_ref, run_dir FROM jobs"
                           " WHERE state IN ('PENDING', 'RUNNING', 'RESTARTING')")

    def job(self, job_id: str) -> dict[str, Any] | None:
        rows = self._dicts("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return rows[0] if rows else None

    def find_job_id(self, prefix: str) -> str | None:
        """Exact id, or a unique prefix of one (like git)."""
        rows = self.conn.execute("SELECT id FROM jobs WHERE id = ? OR id LIKE ? ESCAPE '\\' LIMIT 3",
                                 (prefix, prefix.replace("\\", "\\\\").replace("%", "\\%")
                                  .replace("_", "\\_") + "%")).fetchall()
        ids = {r[0] for r in rows}
        if prefix in ids:
            return prefix
        return rows[0][0] if len(rows) == 1 else None

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        return self._dicts("SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt", (job_id,))
