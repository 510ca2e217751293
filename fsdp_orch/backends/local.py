"""The local backend: this machine. A detached supervisor process runs each attempt's launch script
as its own process tree."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdp_orch.backends.base import Submission
from fsdp_orch.plan import LaunchPlan
from fsdp_orch.proctree import job_processes, pid_alive, stop_job_processes
from fsdp_orch.render import Artifact
from fsdp_orch.states import JobState

CANCEL_WAIT_S = 15.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LocalAttempt:
    proc: subprocess.Popen
    job_id: str
    attempt: int

    @property
    def ref(self) -> str:
        return f"pgid:{self.proc.pid}"

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is None:
            return None
        # The launcher is gone; a worker it left behind would still hold ports or a GPU.
        if job_processes(self.job_id, self.attempt):
            stop_job_processes(self.job_id, self.attempt, grace=2.0)
        return code

    def stop(self, grace: float) -> None:
        stop_job_processes(self.job_id, self.attempt, grace=grace, pgid=self.proc.pid)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class LocalLauncher:
    def __init__(self, submission: Submission):
        self.submission = submission

    def launch(self, plan: LaunchPlan, artifacts: list[Artifact]) -> LocalAttempt:
        script = next(a.path for a in artifacts if a.name == "launch.sh")
        console = Path(plan.attempt_dir) / "console-node-0.log"
        console.parent.mkdir(parents=True, exist_ok=True)
        with open(console, "ab") as out:
            proc = subprocess.Popen(["bash", script], stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=plan.attempt_dir)
        return LocalAttempt(proc, plan.job_id, plan.attempt)


class LocalBackend:
    kind = "local"

    def attempt_launcher(self, submission: Submission) -> LocalLauncher:
        return LocalLauncher(submission)

    def port_for_attempt(self, attempt: int) -> int:
        return free_port()

    def start(self, store: Any, submission: Submission) -> None:
        run_dir = submission.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_") or k == "FSDP_ORCH_HOME"}
        env["FSDP_ORCH_HOME"] = submission.home
        with open(run_dir / "supervisor.log", "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "fsdp_orch.supervise.supervisor", submission.job_id],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True, env=env, cwd=run_dir)
        store.update(submission.job_id, supervisor_pid=proc.pid)

    def cancel(self, store: Any, row: dict[str, Any]) -> str:
        job_id = row["id"]
        if not store.set_state(job_id, JobState.CANCELLED, reason="cancelled by user"):
            return f"{job_id} already ended ({store.job(job_id)['state']})"
        pid = row.get("supervisor_pid")
        if pid_alive(pid, must_contain=job_id):
            os.kill(pid, 15)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            if not pid_alive(pid, must_contain=job_id) and not job_processes(job_id):
                break
            time.sleep(0.1)
        stop_job_processes(job_id, grace=2.0)  # whatever the supervisor did not get to
        return f"{job_id} cancelled"


BACKEND = LocalBackend()
