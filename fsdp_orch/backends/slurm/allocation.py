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
from functools import partial
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
BATCH_SCRIPT = "sbatch.sh"  # in the run folder: the batch script sbatch was given
# What a node's task prints before node.sh sends its output to the node-local console (and what srun
# itself says of it); the console reaches the run folder through the node's agent (node_logs).
SRUN_OUTPUT = "srun-node-%n.log"
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

    def __init__(self, submission: Submission, attempt: int, slurm_job: str, step_name: str,
                 leaves_out: bool = False):
        """``leaves_out``: the allocation has spare nodes, and a node found lost is named to the
        supervisor (``lost_hosts``), which runs the next attempt without it."""
        self.leaves_out = leaves_out
        super().__init__(submission.run_dir, attempt, Path(submission.attempt_dir(attempt)),
                         bind="0.0.0.0", announce=node_address(),
                         node_timeout=submission.job.watch.node_timeout,
                         log_patterns=(SRUN_OUTPUT.replace("%n", "*"),))
        self.proc: subprocess.Popen | None = None  # type: ignore[type-arg]
        self.slurm_job = slurm_job
        self.step_name = step_name

    @property
    def ref(self) -> str:
        return f"slurm:{self.slurm_job}:{self.step_name}"

    def poll(self) -> int | None:
        assert self.proc is not None
        return self.judge_exit(self.proc.poll())

    def lost_hosts(self) -> tuple[str, ...]:
        """The SLURM names of the nodes whose agent went silent past the node timeout (each agent
        says its node's SLURMD_NODENAME), where the allocation has spares to run without them."""
        return self.channel.lost_hosts() if self.leaves_out else ()

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
        out = query_runner()(["squeue", "-h", "-s", "-j", self.slurm_job, "-o", "%i %j"],
                             60.0).stdout
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
    """The attempt's job step: one task (``script``) on each node of the allocation, or of the
    plan's node list where the allocation holds spares."""
    assert isinstance(plan.profile, SlurmProfile)
    chosen = ([f"--nodelist={','.join(plan.node_names)}", f"--ntasks={plan.nnodes}"]
              if plan.node_names else [])
    return ["srun", "--overlap", f"--nodes={plan.nnodes}", *chosen, "--ntasks-per-node=1",
            "--kill-on-bad-exit=1", f"--job-name={step_name(plan.attempt)}",
            f"--output={plan.attempt_dir}/{SRUN_OUTPUT}", *container_options(plan.profile),
            "bash", script]


def allocation_nodes(runner: Runner | None = None) -> tuple[str, ...]:
    """The nodes of this allocation by SLURM name, this one (the batch script's, where the
    supervisor and the rendezvous run) first."""
    listed = run_command(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                         runner=query_runner(runner)).split()
    here = os.environ.get("SLURMD_NODENAME", "")
    return tuple(sorted(listed, key=lambda name: name != here))


def resubmit_without(run_dir: Path, left_out: tuple[str, ...], runner: Runner | None = None) -> str:
    """This job's batch script submitted again as a new SLURM job that excludes ``left_out``
    (SLURM refuses to change a running job's ExcNodeList, and a requeued job keeps it); returns the
    new job's id. The new job starts with this one's events: it resumes from the latest complete
    checkpoint and leaves the same nodes out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    if "SLURM_CONF" in os.environ:
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    argv = ["sbatch", "--parsable", f"--exclude={','.join(left_out)}", str(run_dir / BATCH_SCRIPT)]
    out = run_command(argv, runner=runner or partial(command.run, env=env))
    return out.strip().split(";")[0]


def allocation_ending() -> bool:
    """Is SLURM taking this allocation away (requeue, preemption, time limit, cancel)?"""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    out = query_runner()(["squeue", "-h", "-j", job, "-o", "%T"], 60.0).stdout.strip()
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
        self.spares = submission.profile.spares_for(submission.job.spare_nodes)
        self.nodes: tuple[str, ...] = ()

    @property
    def checkpoints(self) -> Storage:
        return LOCAL

    def port_for_attempt(self, attempt: int) -> int:
        return free_port("0.0.0.0")

    def machines(self, attempt: int, say: Callable[[str], None]) -> tuple[str, ...]:
        """The allocation's nodes where it holds spares (an attempt's step is given its node list);
        () where every attempt runs on all of them."""
        if not self.spares:
            return ()
        if not self.nodes:
            self.nodes = allocation_nodes()
            say(f"allocation of {len(self.nodes)} nodes ({', '.join(self.nodes)}): each attempt "
                f"runs on {self.submission.job.nodes}, the others are spares")
        return self.nodes

    def leaves_out_nodes(self) -> bool:
        return bool(self.spares)

    def job_ending(self) -> None:
        return None  # the keeper hosts end with the allocation

    def requeue_without(self, left_out: tuple[str, ...]) -> Callable[[], str] | None:
        """No spare left: the job goes back through the queue, as a new SLURM job excluding the
        nodes left out."""
        if not self.spares:
            return None
        return lambda: f"slurm:{resubmit_without(self.submission.run_dir, left_out)}"

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
        step = SlurmStep(self.submission, plan.attempt, slurm_job, step_name(plan.attempt),
                         leaves_out=bool(self.spares))
        step.proc = subprocess.Popen(step_argv(plan, script), env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        return step
