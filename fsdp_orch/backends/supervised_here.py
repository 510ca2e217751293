"""The kinds with no scheduler (this machine, SSH hosts): the supervisor runs detached on the
submitting machine, ``status`` re-attaches a new one when it died, and ``cancel`` stops it and then
whatever the job left on its nodes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from fsdp_orch.backends.base import ClusterKind, P
from fsdp_orch.launch.submission import PlannedAttempt, Submission
from fsdp_orch.observe.proctree import pid_alive
from fsdp_orch.places import secrets
from fsdp_orch.places.builtin import METRICS_TEXTFILE_ENV, supervisor_command
from fsdp_orch.places.private import make_private_dirs, open_private
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.status import JobStatus

CANCEL_WAIT_S = 15.0


def supervisor_argv(job_id: str, run_dir: str, reattach: bool) -> list[str]:
    """The supervisor's command line: the installed fsdp-orch's, with arguments built here (never a
    command read from a file: ``submission.json``'s ``supervisor_command`` is not run)."""
    return [*supervisor_command(), job_id, "--run-dir", run_dir,
            *(["--reattach"] if reattach else [])]


def spawn_supervisor(submission: Submission, reattach: bool) -> int:
    """The job's supervisor, detached, logging to the run dir."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FSDP_ORCH_") or k in ("FSDP_ORCH_HOME", METRICS_TEXTFILE_ENV)}
    # The values that came by reference: in its environment only, whence its nodes get them (a
    # re-attached supervisor too: they wait in the private home until the job has ended).
    env.update(secrets.read(submission.job_id, "env"))
    run_dir = submission.run_dir
    argv = supervisor_argv(submission.job_id, str(run_dir), reattach)
    make_private_dirs(str(run_dir))
    with os.fdopen(open_private(str(run_dir / "supervisor.log"), os.O_WRONLY | os.O_APPEND),
                   "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                env=env, cwd=run_dir)
    return proc.pid


class SupervisedHere(ClusterKind[P]):
    """``start``, ``refresh`` and ``cancel`` of a kind whose supervisor runs on the submitting
    machine. A kind adds how to check the nodes before a start (``preflight``) and how to find and
    stop what a job left on them (``leftovers``, ``stop_leftovers``); it names its profile model as
    for ``ClusterKind`` (``class SshKind(SupervisedHere[SshProfile])``)."""

    def preflight(self, submission: Submission) -> None:
        """Raise a FsdpOrchError when the job cannot start (a node that does not answer)."""
        return None

    def leftovers(self, job_id: str, row: JobStatus) -> bool:
        raise NotImplementedError

    def stop_leftovers(self, job_id: str, row: JobStatus) -> None:
        raise NotImplementedError

    def start(self, index: JobIndex, submission: Submission, first: PlannedAttempt) -> None:
        self.preflight(submission)
        pid = spawn_supervisor(submission, reattach=False)
        # Recorded here, at once: a supervisor that dies before it runs is still re-attached by
        # status. The supervisor finds its own pid recorded and does not record it again.
        index.journal(submission.job_id).supervisor_started(pid=pid)

    def refresh(self, index: JobIndex, rows: list[JobStatus]) -> list[str]:
        """Re-attach a supervisor to every job whose supervisor died (``rows`` hold only those, and
        jobs the scheduler knows of: none here); it adopts the attempt still running (a lock in the
        run directory admits one supervisor per job)."""
        from fsdp_orch.record.run_roots import run_folder_problem

        reattached = []
        for row in rows:
            if not row.supervisor_pid or run_folder_problem(row.run_dir):
                continue  # a folder another account could have written is never adopted
            # The new supervisor records its own pid once it holds the job's lock.
            spawn_supervisor(Submission.load(Path(row.run_dir), self), reattach=True)
            reattached.append(row.id)
        return reattached

    def cancel(self, index: JobIndex, row: JobStatus) -> str:
        job_id = row.id
        ended = index.request_cancel(job_id)
        if ended:
            return f"{job_id} already ended ({ended})"
        pid = row.supervisor_pid
        if pid is not None and pid_alive(pid, must_contain=job_id):
            os.kill(pid, 15)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            if not pid_alive(pid, must_contain=job_id) and not self.leftovers(job_id, row):
                break
            time.sleep(0.1)
        self.stop_leftovers(job_id, row)  # whatever the supervisor did not get to
        return f"{job_id} cancelled"
