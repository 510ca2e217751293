"""The scheduler's jobs, through the index and job control as
``fsdp-orch submit``/``cancel`` use."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fsdp_orch.jobspec.schedule import Schedule
from fsdp_orch.record.index import JobIndex
from fsdp_orch.vocab.states import TERMINAL_NAMES, JobState


class IndexJobs:
    def __init__(self, index: JobIndex, after_submit: Callable[[str], None] | None = None):
        self.index = index
        self.after_submit = after_submit  # tests: a pause in which to kill the scheduler

    def existing(self, key: str) -> str | None:
        found = self.index.store.job_for_key(key)
        if found is None:
            self.index.ingest()  # a submit whose event the index has not read yet
            found = self.index.store.job_for_key(key)
        return found

    def _states(self, job_ids: list[str]) -> dict[str, str]:
        from fsdp_orch.control.liveness import refresh

        known = [j for j in job_ids if self.index.store.has_job(j)]
        self.index.ingest(known)
        refresh(self.index, known)
        return {j: self.index.store.job(j).state for j in known}  # type: ignore[union-attr]

    def active(self, job_ids: list[str]) -> list[str]:
        states = self._states(job_ids)
        return [j for j in job_ids if j in states and states[j] not in TERMINAL_NAMES]

    def succeeded(self, job_ids: list[str]) -> list[str]:
        states = self._states(job_ids)
        return [j for j in job_ids if states.get(j) == JobState.SUCCEEDED]

    def submit(self, schedule: Schedule, key: str, origin: dict[str, str],
               init_from: str | None) -> str:
        from fsdp_orch.control.job_control import submit
        from fsdp_orch.control.submit_request import SubmitRequest

        request = SubmitRequest(Path(schedule.job_file), schedule.cluster,
                                tuple(schedule.overrides),
                                accelerate_config=schedule.accelerate_config, idempotency_key=key,
                                init_from=init_from or None, origin=origin)
        job_id, _ = submit(self.index, request)
        if self.after_submit is not None:
            self.after_submit(job_id)
        return job_id

    def cancel(self, job_id: str) -> None:
        from fsdp_orch.control.job_control import cancel

        cancel(self.index, job_id)


PAUSE_AFTER_SUBMIT_ENV = "FSDP_ORCH_TEST_PAUSE_AFTER_SUBMIT"


def pause_after_submit_hook() -> Callable[[str], None] | None:
    """For the crash test: ``$FSDP_ORCH_TEST_PAUSE_AFTER_SUBMIT=FILE`` makes the scheduler write the
    job id it just submitted to FILE and stop there, before it records the tick, to be killed."""
    import os

    marker = os.environ.get(PAUSE_AFTER_SUBMIT_ENV)
    if not marker:
        return None

    def pause(job_id: str) -> None:
        import time

        with open(marker, "w") as f:
            f.write(job_id)
        time.sleep(3600)

    return pause


__all__ = ["IndexJobs", "PAUSE_AFTER_SUBMIT_ENV", "pause_after_submit_hook"]
