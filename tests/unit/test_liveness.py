"""Which active jobs `status` hands to their cluster kind (importing a kind costs `status` time)."""

from __future__ import annotations

import os
import subprocess
import sys

from fsdp_orch.control.liveness import needs_settling
from fsdp_orch.record.status import JobStatus


def row(**fields: object) -> JobStatus:
    return JobStatus(id="job42abc", name="demo", cluster="local", kind="local",
                     run_dir="/r/job42abc",
                     created_at=0.0, **fields)  # type: ignore[arg-type]


def test_only_jobs_with_something_started_and_no_live_supervisor_here_are_looked_at() -> None:
    assert not needs_settling(row())  # nothing was ever started for it
    assert needs_settling(row(backend_ref="slurm:7"))  # the scheduler knows more
    assert needs_settling(row(supervisor_pid=os.getpid()))  # alive, but not this job's supervisor
    # Popen can return before the child's exec (when our stdin is closed, as in CI): wait for its
    # line.
    supervisor = subprocess.Popen([sys.executable, "-c",
                                   "import time; print(flush=True); time.sleep(30)",
                                   "job42abc"], stdout=subprocess.PIPE)
    try:
        supervisor.stdout.readline()  # type: ignore[union-attr]
        assert not needs_settling(row(supervisor_pid=supervisor.pid, backend_ref="slurm:7"))
    finally:
        supervisor.kill()
        supervisor.wait()
    assert needs_settling(row(supervisor_pid=supervisor.pid))  # died: a kind re-attaches or settles
