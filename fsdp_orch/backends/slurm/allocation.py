"""Inside a SLURM allocation: the supervisor (run by the batch script on the first node) starts each
attempt as a job step over every node (``srun --overlap``, one task per node), and learns from
SLURM when the allocation is being taken away."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from fsdp_orch.backends.base import AllocationEnding
from fsdp_orch.backends.node_channel import AgentObservation
from fsdp_orch.backends.ports import free_port
from fsdp_orch.backends.slurm.profile import SlurmProfile
from fsdp_orch.checkpoints.storage import LOCAL, Storage
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.render import Artifact, write_artifacts
from fsdp_orch.launch.submission import Submission
from fsdp_orch.observe import command
from fsdp_orch.observe.command import CommandResult, Runner, run_command
from fsdp_orch.vocab.backoff import SLURM_QUERY, Sleep, retrying

NODE_SCRIPT = "node.sh"
# What squeue says of a job the controller no longer holds (ended a while ago): an answer.
UNKNOWN_JOB = "Invalid job id"


def failed_on_the_way(result: CommandResult) -> bool:
    """Whether a query (sacct, squeue) failed before SLURM answered it: the controller or the
    accounting database busy, restarting or out of reach. A missing binary, a job SLURM no longer
    knows, and our own timeout (it waited long enough) are not tried again."""
    return result.returncode not in (0, 124, 126, 127) and UNKNOWN_JOB not in result.stderr


def query_runner(runner: Runner | None = None, sleep: Sleep = time.sleep) -> Runner:
    """A Runner for SLURM's read-only queries (never sbatch or scancel): a call that failed on the
    way is made again, backing off (``backoff.SLURM_QUERY``); when it keeps failing, the last
    result is returned, for the caller to read as any other."""
    def run(argv: list[str], timeout: float = 60.0) -> CommandResult:
        again = retrying(SLURM_QUERY, sleep=sleep, not_yet=failed_on_the_way)
        return again(runner or command.run, argv, timeout)
    return run


class SlurmStep(AgentObservation):
    """One attempt: an ``srun`` job step over every node of the allocation. Each node's agent
    streams its ranks' summary to this supervisor (on the first node); logs and checkpoints are read
    from the run directory the nodes share with it."""

    def __init__(self, submission: Submission, attempt: int, slurm_job: str, step_name: str):
        super().__init__(submission.run_dir, attempt, Path(submission.attempt_dir(attempt)),
                         bind="0.0.0.0", announce=node_address(),
                         node_timeout=submission.job.watch.node_timeout)
        self.proc: subprocess.Popen | None = None  # type: ignore[type-arg]
        self.slurm_job = slurm_job
        self.step_name = step_name

    @property
    def ref(self) -> str:
        return f"slurm:{self.slurm_job}:{self.step_name}"

    def poll(self) -> int | None:
        assert self.proc is not None
        return self.judge_exit(self.proc.poll())

    def stop(self, grace: float) -> None:
        assert self.proc is not None
        self.stop_ranks(grace)  # every node at once, by its agent; then the step itself
        step = self._step_id()
        if step is not None:
            command.run(["scancel", f"{self.slurm_job}.{step}"])
        try:
            self.proc.wait(timeout=grace + 5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def _step_id(self) -> str | None:
        out = query_runner()(["squeue", "-h", "-s", "-j", self.slurm_job, "-o", "%i %j"]).stdout
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


def container_options(profile: SlurmProfile) -> list[str]:
    """pyxis/enroot options for the attempt's step, when the profile names a container."""
    box = profile.container
    if box is None:
        return []
    options = [f"--container-image={box.image}"]
    if box.mounts:
        options.append(f"--container-mounts={','.join(box.mounts)}")
    if box.workdir:
        options.append(f"--container-workdir={box.workdir}")
    return options


def step_name(attempt: int) -> str:
    return f"fsdp-orch-attempt-{attempt}"


def step_argv(plan: LaunchPlan, script: str) -> list[str]:
    """The attempt's job step: every node of the allocation, one task (``script``) per node."""
    assert isinstance(plan.profile, SlurmProfile)
    return ["srun", "--overlap", f"--nodes={plan.nnodes}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=1", f"--job-name={step_name(plan.attempt)}",
            f"--output={plan.attempt_dir}/console-node-%n.log", *container_options(plan.profile),
            "bash", script]


def allocation_ending() -> bool:
    """Is SLURM taking this allocation away (requeue, preemption, time limit, cancel)?"""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    out = query_runner()(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()
    return out != "RUNNING"


def requeue_this_job() -> None:
    run_command(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]])


def on_time_limit_warning(requeue: Callable[[], None] = requeue_this_job,
                          signal_delay: float = 0.0) -> None:
    """``--signal=B:USR2@N``: the time limit (or a preemption) is N seconds away. The supervisor
    asks the running attempt for a checkpoint (within half of N), records the warning and asks for
    the requeue; the next allocation resumes from the latest complete checkpoint."""
    def warned(signum: int, frame: object) -> None:
        raise AllocationEnding("SLURM signalled the job (time limit or preemption): requeued",
                               requeue=requeue, checkpoint_within=signal_delay / 2)

    signal.signal(signal.SIGUSR2, warned)


class SlurmStepLauncher:
    def __init__(self, submission: Submission):
        self.submission = submission
        assert isinstance(submission.profile, SlurmProfile)
        on_time_limit_warning(signal_delay=submission.profile.signal_delay)

    @property
    def checkpoints(self) -> Storage:
        return LOCAL

    def port_for_attempt(self, attempt: int) -> int:
        return free_port("0.0.0.0")

    def machines(self, attempt: int, say: Callable[[str], None]) -> tuple[str, ...]:
        return ()  # the allocation's nodes, known to SLURM

    def adopt(self, attempt: int, ref: str | None) -> SlurmStep:
        raise NotImplementedError("a SLURM attempt is never adopted: "
                                  "a requeued job starts the next attempt")

    def launch(self, plan: LaunchPlan, artifacts: list[Artifact]) -> SlurmStep:
        write_artifacts(artifacts)
        script = next(a.path for a in artifacts if a.name == NODE_SCRIPT)
        slurm_job = os.environ["SLURM_JOB_ID"]
        env = dict(os.environ)
        env["RDZV_HOST"] = node_address()
        # announces itself first
        step = SlurmStep(self.submission, plan.attempt, slurm_job, step_name(plan.attempt))
        step.proc = subprocess.Popen(step_argv(plan, script), env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        return step
