"""Noticing, at status time, jobs whose supervisor is gone. Cheap: only active jobs are looked at."""

from __future__ import annotations

from fsdp_orch.states import JobState


def refresh(store, job_ids: list[str] | None) -> None:  # type: ignore[no-untyped-def]
    """A local job whose supervisor died without ending it is marked FAILED with the reason."""
    rows = [r for r in store.active_jobs() if r["kind"] == "local" and r["supervisor_pid"]]
    if not rows:
        return
    from fsdp_orch.proctree import pid_alive

    for row in rows:
        if job_ids is not None and row["id"] not in job_ids:
            continue
        if row["kind"] != "local" or row["supervisor_pid"] is None:
            continue
        if not pid_alive(row["supervisor_pid"], must_contain=row["id"]):
            fresh = store.job(row["id"])
            if fresh and fresh["state"] == row["state"]:
                store.set_state(row["id"], JobState.FAILED,
                                reason=f"supervisor (pid {row['supervisor_pid']}) died")
