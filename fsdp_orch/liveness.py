"""At status time, each cluster kind settles its active jobs: what its scheduler knows that a dead
supervisor cannot report, and a new supervisor for a job whose supervisor died.

Cheap: only active jobs are looked at, and a kind is imported only when it has one.
"""

from __future__ import annotations

from fsdp_orch.store import Store


def refresh(store: Store, job_ids: list[str] | None) -> list[str]:
    """Returns the ids of the jobs a kind changed or re-attached a supervisor to."""
    active = store.active_jobs()
    if job_ids is not None:
        active = [r for r in active if r["id"] in job_ids]
    by_kind: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for row in active:
        by_kind.setdefault(row["kind"], []).append(row)
    if not by_kind:
        return []
    from fsdp_orch.backends.registry import cluster_kind

    changed: list[str] = []
    for name, rows in by_kind.items():
        changed += cluster_kind(name).refresh(store, rows)
    return changed
