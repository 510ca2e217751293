"""What submitit runs inside the allocation: the supervisor on the first node, an idle task elsewhere.

Pickled by submitit; kept small and importable without torch.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import submitit


class SlurmSupervisorTask(submitit.helpers.Checkpointable):
    def __init__(self, job_id: str, home: str):
        self.job_id = job_id
        self.home = home

    def _done_marker(self) -> Path:
        return Path(self.home) / "runs" / self.job_id / "allocation-done"

    def __call__(self) -> str:
        os.environ["FSDP_ORCH_HOME"] = self.home
        env = submitit.JobEnvironment()
        if env.global_rank != 0:
            # The other nodes only hold their part of the allocation; attempts run as job steps.
            while not self._done_marker().exists():
                time.sleep(2)
            return "idle"
        from fsdp_orch.supervise.supervisor import run_supervisor

        marker = self._done_marker()
        marker.unlink(missing_ok=True)
        try:
            run_supervisor(self.job_id, in_allocation=True)
        finally:
            marker.touch()
        return "done"

    def checkpoint(self, *args: object, **kwargs: object) -> submitit.helpers.DelayedSubmission:
        """USR2 before the time limit, or preemption: the checkpoints on disk are what the next
        allocation resumes from; record why, and let submitit requeue."""
        from fsdp_orch.resources import home
        from fsdp_orch.states import TERMINAL_NAMES, JobState
        from fsdp_orch.store import Store, default_path

        os.environ["FSDP_ORCH_HOME"] = self.home
        store = Store(default_path(home()))
        row = store.job(self.job_id)
        if row is not None and row["state"] not in TERMINAL_NAMES:
            attempt = max(0, int(row["attempts"]) - 1)
            store.add_failure(self.job_id, attempt=attempt, category="preemption_or_node_lost",
                              evidence="SLURM signalled the job (time limit or preemption): requeued",
                              action="requeue")
            store.set_state(self.job_id, JobState.RESTARTING, reason="requeued by SLURM")
        store.close()
        return submitit.helpers.DelayedSubmission(self)
