"""The notifier process: started detached by ``submit`` when the job or its cluster has ``notify:``;
one per job (a lock in its run folder), living until the job ended and everything is sent."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from fsdp_orch.jobspec.notify import Webhook
from fsdp_orch.jobspec.secrets import SecretRef
from fsdp_orch.launch.submission import Submission
from fsdp_orch.places import secrets
from fsdp_orch.places.private import make_private_dirs, open_private

NOTIFY_DIR = "notify"
log = logging.getLogger(__name__)


def webhooks_of(submission: Submission) -> list[Webhook]:
    """The cluster profile's webhooks, then the job's."""
    return [*submission.profile.notify, *submission.job.notify]


def with_header_values(hooks: list[Webhook], values: dict[str, dict[str, str]]
                       ) -> tuple[list[Webhook], list[tuple[int, str]]]:
    """``hooks`` with the values of their referenced headers filled in (``values``:
    by webhook index, as ``submit`` kept them). A hook whose value is missing is
    left out: (index, header) of each."""
    ready, missing = [], []
    for i, hook in enumerate(hooks):
        kept = values.get(str(i), {})
        gone = [name for name, value in hook.headers.items()
                if isinstance(value, SecretRef) and name not in kept]
        if gone:
            missing += [(i, name) for name in gone]
            continue
        headers = {name: kept[name] if isinstance(value, SecretRef) else value
                   for name, value in hook.headers.items()}
        ready.append(hook.model_copy(update={"headers": headers}))
    return ready, missing


def start_notifier(submission: Submission) -> int | None:
    """Spawn the job's notifier, detached as the supervisor is (its own session, output to a log in
    the run folder), so it outlives the CLI; None when nothing is configured or it could not start
    (said in the job's events: the job itself is not held back for a webhook)."""
    if not webhooks_of(submission):
        return None
    directory = submission.run_dir / NOTIFY_DIR
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FSDP_ORCH_") or k == "FSDP_ORCH_HOME"}
    try:
        make_private_dirs(str(directory))
        with os.fdopen(open_private(str(directory / "notifier.log"), os.O_WRONLY | os.O_APPEND),
                       "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "fsdp_orch.notify.process",
                                     str(submission.run_dir)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True, env=env, cwd=directory)
    except OSError as exc:
        from fsdp_orch.record.events import EventWriter
        from fsdp_orch.record.journal import Journal

        Journal(EventWriter(submission.run_dir, "notify"), submission.job_id).add_event(
            attempt=None, kind="notify_not_started",
            message=f"no notifier for this job's webhooks: {exc}")
        return None
    return proc.pid


def _hold_lock(directory: Path) -> int | None:
    import fcntl

    make_private_dirs(str(directory))
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def main(run_dir: str) -> int:

    from fsdp_orch.backends.registry import cluster_kind
    from fsdp_orch.notify.delivery import Notifier, http_post
    from fsdp_orch.notify.due import Due
    from fsdp_orch.record.events import EventWriter
    from fsdp_orch.record.index import open_index
    from fsdp_orch.record.journal import Journal
    from fsdp_orch.record.status import JobStatus

    path = Path(run_dir)
    if _hold_lock(path / NOTIFY_DIR) is None:
        log.info("another notifier holds this job")
        return 0
    submission = Submission.load(path, cluster_kind(Submission.kind_name(path)))
    job_id = submission.job_id
    journal = Journal(EventWriter(path, "notify"), job_id)

    def status() -> JobStatus | None:
        with open_index() as index:
            index.ingest([job_id])
            return index.store.job(job_id)

    def gave_up(item: Due, error: str) -> None:
        log.warning(f"gave up on {item.trigger} for webhook {item.hook}: {error}")
        journal.add_event(attempt=None, kind="notify_gave_up",
                          message=f"webhook {item.hook} ({item.trigger}): "
                                  f"no answer within its retry_for ({error})")

    hooks, missing = with_header_values(webhooks_of(submission), secrets.read(job_id, "notify"))
    for i, name in missing:
        journal.add_event(attempt=None, kind="notify_not_started",
                          message=f"webhook {i}: the value of header {name} "
                                  "(by reference) is no longer kept")
    Notifier(str(path), hooks, post=http_post, status=status, clock=time.time,
             sleep=time.sleep, gave_up=gave_up).run()
    secrets.forget(job_id, "notify")  # everything is sent: the values are not needed again
    return 0


if __name__ == "__main__":
    from fsdp_orch.vocab import process_log

    os.umask(0o077)  # the ledger and the log are this user's alone
    process_log.setup("stdout")  # notify/notifier.log
    raise SystemExit(main(sys.argv[1]))
