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

from fsdp_orch.record.events import CANCEL_MARKER, EventWriter, event_files, read_from
from fsdp_orch.record.store import Store
from fsdp_orch.vocab.states import JobState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from fsdp_orch.record.journal import Journal


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
    def __init__(self, store: Store, runs_roots: list[str], warn=None):  # type: ignore[no-untyped-def]
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
        row = self.store.job(job_id)
        if row is not None:
            return str(row["run_dir"])
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
        row = self.store.job(job_id)
        if row is None or JobState(row["state"]).is_terminal():
            return None if row is None else str(row["state"])
        open(os.path.join(row["run_dir"], CANCEL_MARKER), "a").close()
        self.journal(job_id).set_state(JobState.CANCELLED, reason="cancelled by user")
        return None

    # --- reading the logs ------------------------------------------------------------------

    def ingest(self, job_ids: list[str] | None = None) -> None:
        """Bring the index up to date with the event logs of ``job_ids`` (None: every job that can
        have changed)."""
        if job_ids is not None:
            folders = {job_id: self.run_dir(job_id) for job_id in job_ids}
        else:
            folders = {row["id"]: row["run_dir"] for row in self.store.active_jobs()}
            folders.update(self._new_job_folders())
        for job_id in sorted(folders):
            self.ingest_files(job_id, event_files(folders[job_id]))

    def _new_job_folders(self) -> dict[str, str]:
        """Job folders the index does not know, looked for only in runs folders that changed."""
        known: set[str] | None = None
        found: dict[str, str] = {}
        for root in self.runs_roots:
            try:
                mtime = os.stat(root).st_mtime_ns
            except OSError:
                continue
            key = f"runs_mtime_ns:{root}"
            if self.store.meta(key) == mtime:
                continue
            if known is None:
                known = self.store.job_ids()
            for name in os.listdir(root):
                if name not in known and name not in found and os.path.isdir(os.path.join(root, name, "events")):
                    found[name] = os.path.join(root, name)
            self.store.set_meta(key, mtime)
        return found

    def ingest_files(self, job_id: str, paths: list[str]) -> None:
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
            for event in result.events:
                apply_event(self.store, job_id, event)
            self.store.set_ingested(path, result.offset, result.line)


def apply_event(store: Store, job_id: str, event: dict[str, Any]) -> None:
    """One event into the index, with its own time (a rebuilt index says the same as the old)."""
    kind, at = event["kind"], float(event["at"])
    if kind == "submitted":
        if store.job(job_id) is None:
            store.create_job(name=event["name"], cluster=event["cluster"], kind=event["cluster_kind"],
                             spec_json=event["spec_json"], run_dir_root=os.path.dirname(event["run_dir"]),
                             job_file=event.get("job_file"), spec_hash=event.get("spec_hash"),
                             idempotency_key=event.get("idempotency_key"), job_id=job_id,
                             origin=event.get("origin"), now=at)
        return
    if store.job(job_id) is None:
        return  # the job's submission is not readable (yet): its other events wait for a rebuild
    if kind == "supervisor_started":
        store.update(job_id, supervisor_pid=event.get("pid"))
    elif kind in ("scheduled", "attempt_launched"):
        store.update(job_id, backend_ref=event.get("backend_ref"))
    elif kind == "attempt_started":
        store.start_attempt(job_id, int(event["attempt"]), resume_from=event.get("resume_from"), now=at)
    elif kind == "first_step":
        store.first_step(job_id, int(event["attempt"]), float(event["first_step_at"]))
    elif kind == "progress":
        store.update(job_id, progress_step=event["step"], progress_loss=event.get("loss"),
                     progress_at=event.get("progress_at"))
    elif kind == "checkpoint_committed":
        store.update(job_id, last_checkpoint_step=event["step"])
    elif kind == "hang_detection":
        store.update(job_id, hang_detection_off=event.get("off_because"))
    elif kind == "failure_detected":
        store.add_failure(job_id, attempt=int(event["attempt"]), category=event["category"],
                          evidence=event.get("evidence"), action=event["action"],
                          stalled_for_s=event.get("stalled_for_s"), now=at)
    elif kind == "notice":
        store.add_event(job_id, attempt=event.get("attempt"), kind=event["notice"], message=event["message"],
                        now=at)
    elif kind == "attempt_ended":
        store.end_attempt(job_id, int(event["attempt"]), event.get("exit_code"), now=at)
    elif kind in ("restart_scheduled", "allocation_requeued"):
        store.set_state(job_id, JobState.RESTARTING, reason=event.get("reason"), now=at)
    elif kind in ("state", "finished"):
        store.set_state(job_id, JobState(event["state"]), reason=event.get("reason"), now=at)


def open_index(home: str | None = None) -> JobIndex:
    """The index of ``$FSDP_ORCH_HOME``'s runs folder and the profiles' shared run roots, opened
    where the database belongs."""
    from fsdp_orch.places.home import home_dir, store_path
    from fsdp_orch.record.run_roots import runs_roots

    root = home or home_dir()
    store = Store(store_path(root))
    return JobIndex(store, runs_roots(store, root))

