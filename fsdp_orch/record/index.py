"""The store as an index of the event logs: the CLI on the submit host reads what each job's event
files gained since last time (by byte offset) into SQLite, and writes its own changes (submit,
cancel, a scheduler's verdict) as events first. Deleting the database loses nothing: the next
``status`` reads every event log again.

Only the CLI opens the database. Which jobs are read: the active ones, and every job folder when
the runs folder changed since the last look (a job submitted from another login node, or a
database rebuilt from nothing)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from fsdp_orch.record.events import (
    CANCEL_MARKER,
    EventWriter,
    event_files,
    order_key,
    read_from,
    read_keyed,
)
from fsdp_orch.record.store import Store
from fsdp_orch.record.store_schema import MEMORY
from fsdp_orch.vocab.states import JobState

BROKEN = JobState.BROKEN.value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsdp_orch.record.journal import Journal
    from fsdp_orch.record.status import JobStatus


class _IngestingWriter(EventWriter):
    """The CLI's writer: each event goes into the index as soon as it is written."""

    def __init__(self, index: JobIndex, run_dir: str, job_id: str, role: str):
        super().__init__(run_dir, role)
        self.index = index
        self.job_id = job_id

    def append(self, kind: str, at: float | None = None, **fields: object) -> dict[str, object]:
        event = super().append(kind, at, **fields)
        self.index.ingest_files(self.job_id, [self.path])
        return event


class JobIndex:
    def __init__(self, store: Store, runs_roots: list[str],
                 warn: Callable[[str], None] | None = None):
        """``runs_roots``: the folders whose job folders this index reads, the first one this
        home's own (see fsdp_orch.record.run_roots)."""
        self.store = store
        self.runs_roots = runs_roots
        self.warn = warn or (lambda text: print(f"fsdp-orch: warning: {text}", file=sys.stderr))
        self._journals: dict[str, Journal] = {}

    def __enter__(self) -> JobIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.close()

    def run_dir(self, job_id: str) -> str:
        known = self.store.run_dir(job_id)
        if known is not None:
            return known
        for root in self.runs_roots:
            if os.path.isdir(os.path.join(root, job_id)):
                return os.path.join(root, job_id)
        return os.path.join(self.runs_roots[0], job_id)

    def journal(self, job_id: str, role: str = "cli", run_dir: str | None = None) -> Journal:
        """Where this CLI process records what it does to ``job_id`` (one file per process and job;
        ``submit`` for the submission, which readers take first). ``run_dir`` for a job not yet
        in the index."""
        from fsdp_orch.record.journal import Journal

        key = f"{role}/{job_id}"
        if key not in self._journals:
            writer = _IngestingWriter(self, run_dir or self.run_dir(job_id), job_id, role)
            self._journals[key] = Journal(writer, job_id)
        return self._journals[key]

    def request_cancel(self, job_id: str) -> str | None:
        """Mark the job cancelled where its supervisor looks (a file in its run folder) and in its
        events. Returns the state it had already ended in, or None."""
        status = self.store.job(job_id)
        if status is None or status.ended:
            return None if status is None else status.state
        os.close(os.open(os.path.join(status.run_dir, CANCEL_MARKER), os.O_WRONLY | os.O_CREAT,
                         0o600))
        self.journal(job_id).set_state(JobState.CANCELLED, reason="cancelled by user")
        return None

    # --- reading the logs ------------------------------------------------------------------

    def ingest(self, job_ids: list[str] | None = None) -> None:
        """Bring the index up to date with the event logs of ``job_ids`` (None: every job that can
        have changed: the active ones, those that ended in the last SETTLING_S, new job folders)."""
        looked: list[tuple[str, str, int]] = []
        found: dict[str, str] = {}
        if job_ids is not None:
            folders = {job_id: self.run_dir(job_id) for job_id in job_ids}
        else:
            import time

            folders = self.store.folders_to_read(ended_since=time.time() - SETTLING_S)
            found = self._new_job_folders(looked)
            folders.update(found)
        for job_id in sorted(folders):
            self.ingest_files(job_id, event_files(folders[job_id]))
        if looked:
            self._mark_looked(looked, found)

    def _mark_looked(self, looked: list[tuple[str, str, int]], found: dict[str, str]) -> None:
        """Keep each runs folder's mtime as seen, only now that the job folders found in it are in
        the index: a process that saw it marked before then would skip them. A folder whose
        submission could not be read yet (its writer is mid-line), or one changed too recently for
        its mtime to tell a later change apart (the clock ticks coarsely), is looked at again."""
        import time

        pending: set[str] = set()
        if found:
            indexed = self.store.job_ids()
            pending = {os.path.dirname(path) for job_id, path in found.items()
                       if job_id not in indexed
                       and not any(self.store.ingested(p)[0] for p in event_files(path))}
        recent = time.time_ns() - 1_000_000_000
        for root, key, mtime in looked:
            if root not in pending and mtime < recent:
                self.store.set_meta(key, mtime)

    def _new_job_folders(self, looked: list[tuple[str, str, int]]) -> dict[str, str]:
        """Job folders the index does not know, looked for only in runs folders that changed; each
        runs folder looked in is added to ``looked`` (root, meta key, mtime) for ``_mark_looked``.
        Only this user's are taken: a runs folder or job folder that someone else owns or can write
        is passed over (``doctor`` names it; see record/run_roots.run_folder_problem)."""
        from fsdp_orch.record.run_roots import root_problem, run_folder_problem

        known: set[str] | None = None
        found: dict[str, str] = {}
        for root in self.runs_roots:
            try:
                mtime = os.stat(root).st_mtime_ns
            except OSError:
                continue
            key = f"runs_mtime_ns:{root}"
            if self.store.meta(key) == mtime or root_problem(root):
                continue
            if known is None:
                known = self.store.job_ids()
            for name in os.listdir(root):
                folder = os.path.join(root, name)
                if name not in known and name not in found \
                        and os.path.isdir(os.path.join(folder, "events")) \
                        and run_folder_problem(folder) is None:
                    found[name] = folder
            looked.append((root, key, mtime))
        return found

    def ingest_files(self, job_id: str, paths: list[str]) -> None:
        """Fold what ``paths`` (the job's event logs) gained into the job's status. Events that come
        after everything folded so far are applied to the kept status; one that belongs before it (a
        writer whose log is read late) makes the job folded again from all its events. Another
        process folding the same job at the same time is noticed when the status is kept, and the
        logs are read again from where that one left them."""
        if not paths:
            return
        for _ in range(50):
            if self._ingest_once(job_id, paths):
                return
        self.warn(f"job {job_id}: its status kept changing under this process; read it again later")

    def _ingest_once(self, job_id: str, paths: list[str]) -> bool:
        last = self.store.last_key(job_id)  # read first: what the offsets below were kept with
        new, ingested = [], []
        for path in paths:
            offset, line = self.store.ingested(path)
            try:
                if os.stat(path).st_size <= offset:
                    continue
            except OSError:
                continue
            result = read_from(path, offset, line)
            for text in result.warnings:
                self.warn(text)
            new += [(list(order_key(event, path)), event) for event in result.events]
            ingested.append((path, result.offset, result.line))
        if not new:
            if ingested:
                self.store.set_ingested_many(ingested)  # lines that were no events
            return True
        from fsdp_orch.record.fold import fold_lines

        new.sort(key=lambda item: item[0])
        status, folded_to = self.store.job(job_id), last
        if status is not None and last is not None and new[0][0] < last:
            # Out of order: fold the whole log again (and take every file as read to its end now).
            offsets: dict[str, tuple[int, int]] = {}
            new, _ = read_keyed(os.path.dirname(os.path.dirname(paths[0])), offsets)
            ingested = [(path, offset, line) for path, (offset, line) in offsets.items()]
            status = None
        was_broken = status is not None and status.state == BROKEN
        lines = [event for _, event in new]
        status = fold_lines(lines, job_id, status)
        if status is None:
            status = self._broken(job_id, paths, lines)
        if status is None:
            return True  # its submission is not readable (yet): read these again next time
        if was_broken and not status.ended:
            status.state = BROKEN  # what a later event says of it is folded in; it stays broken
        kept = self.store.put(status, new[-1][0], ingested, expected_last_key=folded_to)
        if kept is None:
            return False
        if not kept:
            self.store.set_ingested_many(ingested)  # another job holds its idempotency key
        return True


    def _broken(self, job_id: str, paths: list[str],
                lines: list[dict]) -> JobStatus | None:  # type: ignore[type-arg]
        """The job folded from its run folder's ``submission.json`` when its submission event is
        not readable (``record/broken.py``); None when it may yet be (a submit mid-write)."""
        from fsdp_orch.record.broken import mark_broken, submitted_line
        from fsdp_orch.record.fold import fold_lines

        made = submitted_line(job_id, os.path.dirname(os.path.dirname(paths[0])), lines)
        if made is None:
            return None
        line, damaged = made
        status = fold_lines([line, *lines], job_id)
        return None if status is None else mark_broken(status, damaged)


# after a job ended, its logs are still read this long (late events of its supervisor)
SETTLING_S = 600.0



def open_index(home: str | None = None, *, read_only: bool = False) -> JobIndex:
    """The index of ``$FSDP_ORCH_HOME``'s runs folder and the profiles' shared run roots, opened
    where the database belongs. ``read_only`` (status, events, logs, cancel, report, metrics):
    where there is no database yet, one is built in memory for this look, and nothing is made."""
    from fsdp_orch.places.home import home_dir, store_path
    from fsdp_orch.record.heal import examine, open_store
    from fsdp_orch.record.run_roots import runs_roots

    root = home or home_dir()

    def build(fresh: Store) -> None:  # a new database: every job folder of every runs folder
        JobIndex(fresh, runs_roots(fresh, root)).ingest()

    path = store_path(root)
    found, damaged = examine(path) if read_only else (None, None)
    if found is not None:
        store = found
    elif read_only and (damaged is not None or not os.path.exists(path)):
        if damaged is not None:  # moved aside and rebuilt by the next command that writes
            print(f"fsdp-orch: warning: the index {path} cannot be used ({damaged}); read the "
                  "event logs for this look instead", file=sys.stderr)
        store = Store(MEMORY)
        build(store)
    else:
        store = open_store(path, build)
    return JobIndex(store, runs_roots(store, root))


@contextmanager
def open_index_for_submit(home: str | None = None) -> Iterator[JobIndex]:
    """``open_index`` for a submit, whose input is checked against the index (``--init-from`` names
    a job): when the body raises InputError, a database this opening made is removed again, and a
    home it made (if left empty), so that bad input writes nothing."""
    from fsdp_orch.places.home import home_dir, store_path
    from fsdp_orch.vocab.errors import InputError

    root = home or home_dir()
    db = store_path(root)
    had_home, had_db = os.path.isdir(root), os.path.exists(db)
    try:
        with open_index(home) as index:
            yield index
    except InputError:
        if not had_db:
            for path in (db, db + "-wal", db + "-shm", db + "-journal", db + ".lock"):
                with suppress(FileNotFoundError):
                    os.remove(path)
            if not had_home:
                with suppress(OSError):
                    os.rmdir(root)
        raise
