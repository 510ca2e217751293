"""The SLURM backend: submission through submitit; inside the allocation the supervisor runs once (on
the first node) and launches each attempt as a job step across all nodes (``srun``, one task per
node). A hang or crash ends the step and starts a new one in the same allocation; a time limit or
preemption checkpoints and requeues through submitit (USR2 -> ``checkpoint()`` -> requeue)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdp_orch.backends.base import Submission
from fsdp_orch.backends.slurm_parse import JOB_NAME_PREFIX, SACCT_FIELDS, latest_by_job, parse_sacct
from fsdp_orch.errors import CommandError
from fsdp_orch.plan import LaunchPlan
from fsdp_orch.profiles import SlurmProfile
from fsdp_orch.render import Artifact
from fsdp_orch.states import JobState

SUBMITIT_DIR = "submitit"


def time_minutes(limit: str) -> int:
    """SLURM time syntax (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]) to whole minutes (at least 1)."""
    days = 0
    if "-" in limit:
        d, limit = limit.split("-", 1)
        days = int(d)
    parts = [int(p) for p in limit.split(":")]
    if days:
        parts += [0] * (3 - len(parts))
        hours, minutes, seconds = parts
    elif len(parts) == 1:
        hours, minutes, seconds = 0, parts[0], 0
    elif len(parts) == 2:
        hours, minutes, seconds = 0, parts[0], parts[1]
    else:
        hours, minutes, seconds = parts
    return max(1, days * 1440 + hours * 60 + minutes + (1 if seconds else 0))


def executor_parameters(submission: Submission) -> dict[str, Any]:
    """submitit SlurmExecutor parameters from the profile and the plan; derived once, here."""
    profile = submission.profile
    assert isinstance(profile, SlurmProfile)
    plan = submission.plan_only(0)
    params: dict[str, Any] = {
        "job_name": JOB_NAME_PREFIX + submission.job_id,
        "nodes": plan.nnodes,
        "ntasks_per_node": 1,
        "time": time_minutes(profile.time),
        "signal_delay_s": profile.signal_delay,
        "stderr_to_stdout": True,
        "setup": list(profile.setup),
    }
    for ours, theirs in (("partition", "partition"), ("account", "account"), ("qos", "qos"),
                         ("constraint", "constraint"), ("mem", "mem"), ("cpus_per_task", "cpus_per_task")):
        value = getattr(profile, ours)
        if value:
            params[theirs] = value
    if profile.gpus_per_node:
        params["gpus_per_node"] = profile.gpus_per_node
    extra = {k: v for k, v in profile.sbatch_extra.items() if v is not False}
    if extra:
        params["additional_parameters"] = {k: ("" if v is True else v) for k, v in extra.items()}
    return params


def make_executor(submission: Submission, *, render_only: bool = False):  # type: ignore[no-untyped-def]
    import submitit

    executor_class = submitit.SlurmExecutor
    if render_only:  # submitit refuses to exist where srun is missing; rendering needs no SLURM
        class RenderingExecutor(submitit.SlurmExecutor):
            @classmethod
            def affinity(cls) -> int:
                return 1

        executor_class = RenderingExecutor
    executor = executor_class(folder=submission.run_dir / SUBMITIT_DIR, max_num_timeout=100)
    executor.update_parameters(**executor_parameters(submission))
    return executor


def batch_script(submission: Submission) -> str:
    """The batch script submitit submits for this job (what ``render`` shows; nothing is submitted)."""
    executor = make_executor(submission, render_only=True)
    return executor._make_submission_file_text(executor._submitit_command_str, "render")


def run_command(argv: list[str], timeout: float = 60) -> str:
    """The one place this backend runs scheduler commands."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise CommandError(argv, 127, f"{argv[0]} not found on PATH") from None
    if proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stderr or proc.stdout)
    return proc.stdout


# --- inside the allocation ----------------------------------------------------------------------

@dataclass
class SlurmStep:
    """One attempt: an ``srun`` job step over every node of the allocation."""

    proc: subprocess.Popen
    slurm_job: str
    step_name: str

    @property
    def ref(self) -> str:
        return f"slurm:{self.slurm_job}:{self.step_name}"

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self, grace: float) -> None:
        step = self._step_id()
        if step is not None:
            subprocess.run(["scancel", f"{self.slurm_job}.{step}"], capture_output=True, check=False)
        try:
            self.proc.wait(timeout=grace + 5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def _step_id(self) -> str | None:
        out = subprocess.run(["squeue", "-h", "-s", "-j", self.slurm_job, "-o", "%i %j"],
                             capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == self.step_name:
                return parts[0].rsplit(".", 1)[-1]
        return None


def node_address() -> str:
    """This node's address as the other nodes reach it (the rendezvous runs here, on node 0)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class SlurmStepLauncher:
    def __init__(self, submission: Submission):
        self.submission = submission

    def allocation_ending(self) -> bool:
        """Is SLURM taking this allocation away (requeue, preemption, time limit, cancel)?"""
        job = os.environ.get("SLURM_JOB_ID")
        if not job:
            return False
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True,
                             check=False).stdout.strip()
        return out != "RUNNING"

    def launch(self, plan: LaunchPlan, artifacts: list[Artifact]) -> SlurmStep:
        script = next(a.path for a in artifacts if a.name == "node.sh")
        slurm_job = os.environ["SLURM_JOB_ID"]
        step_name = f"fsdp-orch-attempt-{plan.attempt}"
        env = dict(os.environ)
        env["RDZV_HOST"] = node_address()
        argv = ["srun", "--overlap", f"--nodes={plan.nnodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                f"--job-name={step_name}", f"--output={plan.attempt_dir}/console-node-%n.log", "bash", script]
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        return SlurmStep(proc, slurm_job, step_name)


# --- the login node ------------------------------------------------------------------------------

class SlurmBackend:
    kind = "slurm"

    def attempt_launcher(self, submission: Submission) -> SlurmStepLauncher:
        return SlurmStepLauncher(submission)

    def port_for_attempt(self, attempt: int) -> int:
        from fsdp_orch.backends.local import free_port

        return free_port("0.0.0.0")

    def adopt(self, submission: Submission, attempt: int, ref: str | None) -> Any:
        raise NotImplementedError("a SLURM attempt is never adopted: a requeued job starts the next attempt")

    def start(self, store: Any, submission: Submission) -> None:
        from fsdp_orch.backends.slurm_task import SlurmSupervisorTask

        job = make_executor(submission).submit(SlurmSupervisorTask(submission.job_id, submission.home))
        store.update(submission.job_id, backend_ref=f"slurm:{job.job_id}")

    def cancel(self, store: Any, row: dict[str, Any]) -> str:
        job_id = row["id"]
        if not store.set_state(job_id, JobState.CANCELLED, reason="cancelled by user"):
            return f"{job_id} already ended ({store.job(job_id)['state']})"
        slurm_id = slurm_job_id(row.get("backend_ref"))
        if slurm_id:
            run_command(["scancel", slurm_id])
            # SLURM marks the job CANCELLED at once; its steps take up to KillWait to go away.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                left = subprocess.run(["squeue", "-h", "-s", "-j", slurm_id], capture_output=True,
                                      text=True, check=False).stdout.strip()
                if not left:
                    break
                time.sleep(0.5)
        return f"{job_id} cancelled (SLURM job {slurm_id})"


def slurm_job_id(ref: str | None) -> str | None:
    m = re.match(r"slurm:(\d+)", ref or "")
    return m.group(1) if m else None


def query(slurm_ids: list[str]):  # type: ignore[no-untyped-def]
    """One sacct call for all the given SLURM jobs: {slurm id: its allocation record}."""
    if not slurm_ids:
        return {}
    out = run_command(["sacct", "--parsable2", "--noheader", "-X", "-j", ",".join(slurm_ids),
                       "-o", ",".join(SACCT_FIELDS)])
    return latest_by_job(parse_sacct(out))


# An allocation lost this way never reaches the supervisor's own restart logic.
LOST_ALLOCATION = frozenset({"NODE_FAIL", "BOOT_FAIL"})


def refresh(store: Any, rows: list[dict[str, Any]], *, query_fn=None, resubmit_fn=None) -> None:  # type: ignore[no-untyped-def]
    """Settle active SLURM jobs whose allocation ended without the supervisor settling them (cancelled
    or failed while pending, node failure): one scheduler query for all of them. An allocation lost
    to a node failure is resubmitted while the restart budget allows."""
    by_slurm = {sid: row for row in rows if (sid := slurm_job_id(row.get("backend_ref")))}
    if not by_slurm:
        return
    records = (query_fn or query)(list(by_slurm))
    for sid, row in by_slurm.items():
        rec = records.get(sid)
        if rec is None or rec.ours != row["id"]:
            continue  # not (yet) in the accounting, or the id now belongs to someone else's job
        mapped = rec.mapped_state
        if mapped in (JobState.PENDING, JobState.RESTARTING) and row["state"] == JobState.RUNNING.value:
            # back in the queue (requeued, preempted): the next allocation resumes from a checkpoint
            store.set_state(row["id"], JobState.RESTARTING, reason=f"SLURM job {sid} is {rec.state} again")
            continue
        if mapped is None or not mapped.is_terminal():
            continue
        fresh = store.job(row["id"])
        if not fresh or fresh["state"] != row["state"]:
            continue
        if rec.state in LOST_ALLOCATION and _resubmit(store, fresh, sid, rec.state, resubmit_fn):
            continue
        store.set_state(row["id"], mapped, reason=f"SLURM job {sid} ended {rec.state} (exit {rec.exit_code})")


def _resubmit(store: Any, row: dict[str, Any], sid: str, slurm_state: str, resubmit_fn) -> bool:  # type: ignore[no-untyped-def]
    from fsdp_orch.backends.base import Submission

    submission = Submission.load(Path(row["run_dir"]))
    policy = submission.job.restart
    attempt = max(0, int(row["attempts"]) - 1)
    allowed = ("preemption_or_node_lost" in policy.retry_on and int(row["restarts"]) < policy.max_restarts)
    store.add_failure(row["id"], attempt=attempt, category="preemption_or_node_lost",
                      evidence=f"SLURM job {sid} ended {slurm_state}", action="resubmit" if allowed else "give_up")
    if not allowed:
        return False
    store.end_attempt(row["id"], attempt, None)
    store.set_state(row["id"], JobState.RESTARTING, reason=f"SLURM job {sid} ended {slurm_state}: resubmitted")
    (resubmit_fn or BACKEND.start)(store, submission)
    return True


BACKEND = SlurmBackend()
