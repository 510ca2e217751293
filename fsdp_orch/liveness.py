"""Noticing, at status time, jobs whose supervisor is gone, and re-attaching a new one.

Cheap: only active local jobs with a recorded supervisor are looked at. A re-attached supervisor
adopts the attempt that is still running (it never starts a second copy: a lock in the run
directory admits one supervisor per job).
"""

from __future__ import annotations


def refresh(store, job_ids: list[str] | None) -> list[str]:  # type: ignore[no-untyped-def]
    """Re-attach a supervisor to every active local job whose supervisor died; returns their ids."""
    rows = [r for r in store.active_jobs() if r["kind"] == "local" and r["supervisor_pid"]]
    if job_ids is not None:
        rows = [r for r in rows if r["id"] in job_ids]
    if not rows:
        return []
    from fsdp_orch.proctree import pid_alive

    reattached = []
    for row in rows:
        if pid_alive(row["supervisor_pid"], must_contain=row["id"]):
            continue
        from pathlib import Path

        from fsdp_orch.backends.local import BACKEND
        from fsdp_orch.resources import home

        # The new supervisor records its own pid once it holds the job's lock.
        BACKEND.spawn_supervisor(str(home()), row["id"], Path(row["run_dir"]), reattach=True)
        reattached.append(row["id"])
    return reattached
