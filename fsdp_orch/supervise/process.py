"""The supervisor's process, around its loop: one per job (a lock in the run folder), re-attached to
the attempt a dead supervisor left running or started in a scheduler's allocation (a requeue), the
launch's notices said once, and the values that came by reference forgotten once the job ended.

Run as
``python -m fsdp_orch.supervise.supervisor JOB_ID [--run-dir DIR] [--reattach | --in-allocation |
--in-cluster]``
(that module passes its loop in, so that this one does not import it back)."""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

from fsdp_orch.backends.registry import cluster_kind
from fsdp_orch.launch.plan import LAUNCH_CHANGED
from fsdp_orch.launch.submission import SUBMISSION_FILE, AttemptInputs, Submission
from fsdp_orch.places import secrets
from fsdp_orch.places.builtin import home, local_has_gpu
from fsdp_orch.places.private import open_private
from fsdp_orch.record.events import EventWriter
from fsdp_orch.record.journal import Journal, read_status
from fsdp_orch.record.status import JobStatus
from fsdp_orch.supervise.outcomes import Adopt
from fsdp_orch.supervise.stop_flag import StopFlag
from fsdp_orch.vocab.backoff import SUPERVISOR_LOCK, retrying
from fsdp_orch.vocab.categories import FailureCategory
from fsdp_orch.vocab.hints import hint_for
from fsdp_orch.vocab.states import JobState

log = logging.getLogger(__name__)


class Loop(Protocol):
    requeued_attempts: int

    def run(self, adopt: Adopt | None = None, first_attempt: int = 0) -> JobState: ...


# (journal, submission, launcher, *, stop_flag, allocation_ending, ...)
MakeLoop = Callable[..., Loop]


def raise_open_files_limit() -> None:
    """The soft limit on open files up to the hard one (often 1,024 of 524,288): connections that
    others open to the node channel each hold one until they are refused."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass  # the soft limit stays; the channel's own bounds still hold


LOCK_WAIT_S = 60.0  # in a pod: how long the supervisor of the pod before it may take to end


def take_lock(lock: IO[str], wait_s: float, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> bool:
    """The job's lock, at once or within ``wait_s`` seconds; False: another supervisor holds it."""
    def flock() -> bool:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True

    poll = retrying(SUPERVISOR_LOCK, sleep=sleep,
                    transient=lambda exc: isinstance(exc, BlockingIOError),
                    deadline=clock() + wait_s, clock=clock, gave_up=lambda state: False)
    return bool(poll(flock))


def end_at_sigterm() -> None:
    """A SIGTERM ends this process at once, recording nothing: a supervisor in a pod runs as pid 1,
    which the kernel would let ignore it until the pod's grace ran out, while the pod that replaces
    it waits for the job's lock. The job goes on: its attempt runs, for the next supervisor."""
    import signal

    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))


def run_supervisor(make_loop: MakeLoop, job_id: str, run_dir: str | None = None,
                   reattach: bool = False, in_allocation: bool = False,
                   in_cluster: bool = False) -> int:
    """``in_allocation``: run by a scheduler's batch script (SLURM), which owns the signals; a
    requeued job goes on with its next attempt. It reads and writes only the job's run folder
    (events, heartbeats, logs), never the index database. ``in_cluster``: run in a pod of its own
    (Kubernetes, ``supervisor.runs: cluster``), which Kubernetes restarts: each start re-attaches
    to the attempt that runs, and a SIGTERM (the pod deleted, evicted, drained) ends this process,
    not the job, whose attempt the next pod adopts."""
    reattach = reattach or in_cluster
    if in_cluster:
        end_at_sigterm()
    folder = Path(run_dir) if run_dir else home() / "runs" / job_id
    raise_open_files_limit()
    if not (folder / SUBMISSION_FILE).is_file():
        log.error(f"fsdp-orch supervisor: no job {job_id} in {folder.parent}")
        return 2
    # One supervisor per job: the lock lives as long as this process.
    lock = os.fdopen(open_private(str(folder / "supervisor.lock"), os.O_WRONLY | os.O_APPEND), "a")
    if not take_lock(lock, LOCK_WAIT_S if in_cluster else 0.0):
        log.info(f"fsdp-orch supervisor: job {job_id} already has a supervisor")
        # in a pod: the one before it still ends (its pod terminating); an exit 0 would end the
        # supervisor's Job as complete, so fail, and Kubernetes starts this pod's again
        return 1 if in_cluster else 0
    kind = cluster_kind(Submission.kind_name(folder))
    submission = Submission.load(folder, kind)
    view = read_status(str(folder), job_id) or JobStatus(job_id, "", "", "", str(folder), 0.0)
    if view.ended:
        secrets.forget(job_id, "env")
        return 0
    journal = Journal(EventWriter(folder, "supervisor"), job_id)
    # a kind that starts it here records it already (its pid); in a pod, every supervisor is pid 1
    if in_cluster or view.supervisor_pid != os.getpid():
        journal.supervisor_started()
    stop_flag = StopFlag()
    if not in_allocation and not in_cluster:
        stop_flag.install()
    launcher = kind.attempt_launcher(submission)
    # this machine's: what every attempt this supervisor starts is planned with
    has_gpu = local_has_gpu()
    loop = make_loop(journal, submission, launcher, stop_flag=stop_flag,
                     allocation_ending=kind.allocation_ending, local_has_gpu=has_gpu,
                     excluded_hosts=view.excluded_hosts)
    adopt, first_attempt = _where_to_begin(journal, loop, launcher, view, job_id, reattach,
                                           in_allocation)
    # What the launch changes of the job's settings, as planned here; each said once per job.
    attempt = adopt.attempt if adopt else first_attempt
    said = {n.message for n in view.notices if n.kind == LAUNCH_CHANGED}
    for notice in submission.plan_for(attempt, AttemptInputs(local_has_gpu=has_gpu)).notices:
        if notice not in said:
            journal.add_event(attempt=attempt, kind=LAUNCH_CHANGED, message=notice)
    state = JobState.FAILED
    try:
        state = loop.run(adopt, first_attempt)
    except SystemExit:
        journal.set_state(JobState.FAILED, reason="supervisor exited")
        raise
    except BaseException as exc:
        journal.set_state(JobState.FAILED, reason=f"supervisor error: {exc!r}")
        raise
    finally:
        if state != JobState.RESTARTING:  # ended: no supervisor will need the values again
            secrets.forget(job_id, "env")
    log.info(f"fsdp-orch supervisor: job {job_id} ended {state.value}")
    return 0


def _where_to_begin(journal: Journal, loop: Loop, launcher,
                    view: JobStatus, job_id: str, reattach: bool,
                    in_allocation: bool) -> tuple[Adopt | None, int]:
    """The attempt to adopt (re-attaching to a running one), or the attempt to start with."""
    attempts = view.attempt_records
    first_attempt = max(attempts) + 1 if attempts else 0
    # attempts the scheduler or the cluster took: no restart budget used, for this loop too
    requeued = {f.attempt for f in view.failures if f.action == "requeue"}
    loop.requeued_attempts = len(requeued)
    if in_allocation:
        unfinished = [n for n, a in attempts.items() if a.ended_at is None]
        if unfinished:  # the previous allocation ended under it: requeued (time limit, preemption)
            last = max(unfinished)
            if last not in requeued:
                evidence = "the allocation ended during the attempt (requeued)"
                lost = FailureCategory.PREEMPTION_OR_NODE_LOST
                journal.add_failure(attempt=last, category=lost, evidence=evidence,
                                    action="requeue", hint=hint_for(lost, evidence))
                requeued.add(last)
            journal.end_attempt(last, None)
        loop.requeued_attempts = len(requeued)
        log.info(f"fsdp-orch supervisor: job {job_id} in its allocation, attempt {first_attempt}")
        return None, first_attempt
    if not reattach:
        return None, 0
    if view.state == JobState.RUNNING.value and attempts:
        attempt = max(attempts)
        adopt = Adopt(attempt, launcher.adopt(attempt, view.backend_ref),
                      attempts[attempt].started_at, attempts[attempt].first_step_at)
        log.info(f"fsdp-orch supervisor: re-attached to job {job_id} attempt {attempt}")
        return adopt, first_attempt
    # died before launching, or while backing off: the next attempt starts now
    log.info(f"fsdp-orch supervisor: resuming job {job_id} at attempt {first_attempt}")
    return None, first_attempt
