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


# The launch script runs under a small wrapper that writes its exit status to a file, so that a
# supervisor re-attaching after the first one died (it is not the parent) still learns the outcome.
_WRAPPER = 'bash "$1"; code=$?; echo "$code" > "$2.tmp" && mv -f "$2.tmp" "$2"; exit "$code"'
LOST = -1000  # exit status of an attempt whose processes vanished without an exit record


@dataclass
class LocalAttempt:
    job_id: str
    attempt: int
    pgid: int
    exit_file: Path
    proc: subprocess.Popen | None = None  # None when adopted by a re-attached supervisor

    @property
    def ref(self) -> str:
        return f"pgid:{self.pgid}"

    def poll(self) -> int | None:
        if self.proc is not None:
            code = self.proc.poll()
        else:
            code = self._adopted_exit()
        if code is None:
            return None
        # The launcher is gone; a worker it left behind would still hold ports or a GPU.
        if job_processes(self.job_id, self.attempt):
            stop_job_processes(self.job_id, self.attempt, grace=2.0)
        return code

    def _adopted_exit(self) -> int | None:
        try:
            return int(self.exit_file.read_text().strip())
        except (OSError, ValueError):
            pass
        if _group_alive(self.pgid) or job_processes(self.job_id, self.attempt):
            return None
        try:  # the wrapper may have finished between the two looks
            return int(self.exit_file.read_text().strip())
        except (OSError, ValueError):
            return LOST

    def stop(self, grace: float) -> None:
        stop_job_processes(self.job_id, self.attempt, grace=grace, pgid=self.pgid)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        else:
            try:
                os.killpg(self.pgid, 9)
            except (ProcessLookupError, PermissionError):
                pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class LocalLauncher:
    def __init__(self, submission: Submission):
        self.submission = submission

    def launch(self, plan: LaunchPlan, artifacts: list[Artifact]) -> LocalAttempt:
        script = next(a.path for a in artifacts if a.name == "launch.sh")
        console = Path(plan.attempt_dir) / "console-node-0.log"
        console.parent.mkdir(parents=True, exist_ok=True)
        exit_file = Path(plan.attempt_dir) / "exit-node-0"
        with open(console, "ab") as out:
            proc = subprocess.Popen(["bash", "-c", _WRAPPER, "fsdp-orch-attempt", script, str(exit_file)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=plan.attempt_dir)
        return LocalAttempt(plan.job_id, plan.attempt, proc.pid, exit_file, proc)


class LocalBackend:
    kind = "local"

    def attempt_launcher(self, submission: Submission) -> LocalLauncher:
        return LocalLauncher(submission)

    def port_for_attempt(self, attempt: int) -> int:
        return free_port()

    def adopt(self, submission: Submission, attempt: int, ref: str | None) -> LocalAttempt:
        pgid = int(ref.split(":", 1)[1]) if ref and ref.startswith("pgid:") else 0
        exit_file = Path(submission.attempt_dir(attempt)) / "exit-node-0"
        return LocalAttempt(submission.job_id, attempt, pgid, exit_file)

    def spawn_supervisor(self, submission_home: str, job_id: str, run_dir: Path, reattach: bool) -> int:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_ORCH_")}
        env["FSDP_ORCH_HOME"] = submission_home
        argv = [sys.executable, "-m", "fsdp_orch.supervise.supervisor", job_id]
        if reattach:
            argv.append("--reattach")
        with open(run_dir / "supervisor.log", "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True, env=env, cwd=run_dir)
        return proc.pid

    def start(self, store: Any, submission: Submission) -> None:
        run_dir = submission.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        pid = self.spawn_supervisor(submission.home, submission.job_id, run_dir, reattach=False)
        store.update(submission.job_id, supervisor_pid=pid)

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
