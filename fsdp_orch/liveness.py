"""Noticing, at status time, jobs whose supervisor is gone, and re-attaching a new one.

Cheap: only active local jobs with a recorded supervisor are looked at. A re-attached supervisor
adopts the attempt that is still running (it never starts a second copy: a lock in the run
directory admits one supervisor per job).
"""

from __future__ import annotations


def refresh(store, job_ids: list[str] | None) -> list[str]:  # type: ignore[no-untyped-def]
    """Re-attach a supervisor to every active local job whose supervisor died; returns their ids."""
    active = store.active_jobs()
    if job_ids is not None:
        active = [r for r in active if r["id"] in job_ids]
    slurm_rows = [r for r in active if r["kind"] == "slurm"]
    if slurm_rows:
        from fsdp_orch.backends import slurm

        slurm.refresh(store, slurm_rows)
    rows = [r for r in active if r["kind"] == "local" and r["supervisor_pid"]]
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
