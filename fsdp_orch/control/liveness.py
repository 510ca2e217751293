"""At status time, each cluster kind settles its active jobs: what its scheduler knows that a dead
supervisor cannot report, and a new supervisor for a job whose supervisor died.

Cheap: only active jobs are looked at, and a kind is imported only when it has one.
"""

from __future__ import annotations

from fsdp_orch.record.index import JobIndex

TYPE_CHECKING = False  # typing and the record model cost ``status`` milliseconds at start-up
if TYPE_CHECKING:
    from fsdp_orch.record.status import JobStatus
    from fsdp_orch.record.store import ActiveJob


def refresh(index: JobIndex, job_ids: list[str] | None) -> list[str]:
    """Returns the ids of the jobs a kind changed or re-attached a supervisor to."""
    active = [job for job in index.store.active_refs() if job_ids is None or job.id in job_ids]
    by_kind: dict[str, list[JobStatus]] = {}
    for job in active:
        if needs_settling(job):
            status = index.store.job(job.id)
            if status is not None and trusted(status.run_dir):
                by_kind.setdefault(job.kind, []).append(status)
    if not by_kind:
        return []
    from fsdp_orch.backends.registry import cluster_kind

    changed: list[str] = []
    for name, rows in by_kind.items():
        changed += cluster_kind(name).refresh(index, rows)
    return changed


def trusted(run_dir: str) -> bool:
    """Whether a job's run folder is this user's alone: only then is a supervisor started for it or
    its scheduler asked (an index kept by an older fsdp-orch may list
    a folder another account made)."""
    from fsdp_orch.record.run_roots import run_folder_problem

    return run_folder_problem(run_dir) is None


def needs_settling(job: ActiveJob | JobStatus) -> bool:
    """Whether the job's kind has anything to look at: something was started for it, and its
    supervisor is not alive on this machine (where it is, it reports for itself). Checked before a
    kind is imported, which costs ``status`` hundreds of milliseconds."""
    if not job.supervisor_pid and not job.backend_ref:
        return False
    if job.supervisor_pid:
        from fsdp_orch.observe.proctree import pid_alive

        return not pid_alive(job.supervisor_pid, must_contain=job.id)
    return True
