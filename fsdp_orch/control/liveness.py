"""At status time, each cluster kind settles its active jobs: what its scheduler knows that a dead
supervisor cannot report, and a new supervisor for a job whose supervisor died.

Cheap: only active jobs are looked at, and a kind is imported only when it has one.
"""

from __future__ import annotations

from fsdp_orch.record.index import JobIndex


def refresh(index: JobIndex, job_ids: list[str] | None) -> list[str]:
    """Returns the ids of the jobs a kind changed or re-attached a supervisor to."""
    active = index.store.active_jobs()
    if job_ids is not None:
        active = [r for r in active if r["id"] in job_ids]
    by_kind: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for row in active:
        if needs_settling(row):
            by_kind.setdefault(row["kind"], []).append(row)
    if not by_kind:
        return []
    from fsdp_orch.backends.registry import cluster_kind

    changed: list[str] = []
    for name, rows in by_kind.items():
        changed += cluster_kind(name).refresh(index, rows)
    return changed


def needs_settling(row: dict) -> bool:  # type: ignore[type-arg]
    """Whether the job's kind has anything to look at: something was started for it, and its
    supervisor is not alive on this machine (where it is, it reports for itself). Checked before a
    kind is imported, which costs ``status`` hundreds of milliseconds."""
    if not row["supervisor_pid"] and not row["backend_ref"]:
        return False
    if row["supervisor_pid"]:
        from fsdp_orch.observe.proctree import pid_alive

        return not pid_alive(row["supervisor_pid"], must_contain=row["id"])
    return True
