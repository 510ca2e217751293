"""What a cluster kind provides, and what the supervisor sees of an attempt. Protocols only.

A kind (one module or package under ``backends/``, found through ``registry``) owns its profile
model, its planning hook (``place``), its artifacts, and the doing: ``start``, ``cancel``,
``refresh``, and the attempt launcher the supervisor runs attempts with (which also readies the
machines: a TPU VM). The supervisor talks only to that launcher and the attempt handles it returns.
``ClusterKind`` is generic in the kind's profile model: its hooks take that model, not any profile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fsdp_orch.checkpoints.storage import Storage
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.render import Artifact
from fsdp_orch.launch.submission import (  # P: a kind's own profile model
    P,
    PlannedAttempt,
    PlanningKind,
    Submission,
)
from fsdp_orch.observe.command import Runner
from fsdp_orch.observe.file_tail import LogChunk
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.observe.stacks import StackCapture
from fsdp_orch.record.index import JobIndex
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.categories import FailureCategory
from fsdp_orch.vocab.checks import Check
from fsdp_orch.vocab.errors import FsdpOrchError

# A node channel (a node agent's summaries, an SSH host's report stream) says something every
# second; silent for longer than this, what came through it is stale. Under the hang window's 2 s
# floor: a node that died is silent before its peers, who wait for it, can be judged hung.
CHANNEL_SILENT_S = 1.5


@dataclass(frozen=True)
class EngineEnding:
    """What the cluster's own engine says ended (or stops) an attempt, where its ranks' logs and
    exit status cannot: a pod evicted or its node lost, an image that cannot be pulled, a pod no
    node can hold. ``retryable``: False for the user's error, which fails the job at once.
    ``taken``: the cluster took the attempt's nodes away (an eviction, a drain, a preemption, a pod
    deleted), which is no failure of the job's: the next attempt starts with no restart budget
    used, as after a scheduler's requeue."""

    category: FailureCategory
    evidence: str
    retryable: bool = True
    taken: bool = False


class AttemptObservation(Protocol):
    """How the supervisor sees a running attempt, wherever its nodes are."""

    @property
    def checkpoints(self) -> Storage:
        """The filesystem the job's checkpoints are on, as the supervisor can read it."""
        ...

    def heartbeats(self) -> dict[int, Heartbeat]:
        """The latest heartbeat of every rank that wrote one."""
        ...

    def log_chunks(self) -> list[LogChunk]:
        """What every log of the attempt gained since the last call (console and per-rank logs)."""
        ...

    def capture_stacks(self, beats: dict[int, Heartbeat]) -> StackCapture:
        """Every reachable rank's Python stacks, kept with the attempt's files."""
        ...

    def flight_recorder_dumps(self) -> list[str]:
        """The NCCL flight recorder's dump files the ranks wrote."""
        ...

    def lost_node(self) -> str | None:
        """Which node stopped answering, asked now (a peer-lost error may mean its host died);
        None when all answer or the kind cannot tell."""
        ...

    def lost_hosts(self) -> tuple[str, ...]:
        """The hosts (``address:port``) of the nodes found lost so far: the supervisor plans later
        attempts without them (``PlanContext.excluded_hosts``); () when the kind cannot tell."""
        ...

    def left_out_name(self, node: int | None, host: str | None) -> str | None:
        """What the kind's planning leaves out for node rank ``node``, whose agent named its host
        ``host`` (a SLURM node name; an SSH host's ``address:port``); None when unknown."""
        ...

    def node_notes(self) -> dict[int, str]:
        """What each node's launch script told the supervisor at start (its node-local folder
        was someone else's, and which it used instead), by node rank; {} where none can."""
        ...

    def refused_connections(self) -> dict[str, int]:
        """How many connections to the supervisor's node channel were closed before they said the
        attempt's token, by why (its data never kept); {} where there is no such channel."""
        ...

    def ended_by(self) -> EngineEnding | None:
        """What the cluster's engine says ends the attempt (``EngineEnding``), asked at every look;
        None while it says nothing (every kind but Kubernetes: the ranks' logs and exit status
        tell)."""
        ...

    def waiting_for(self) -> str | None:
        """Why not every node of the attempt runs yet, in the cluster's own words (a pod the
        scheduler cannot place), asked at every look; None where nothing waits or nothing says."""
        ...

    def silent_nodes(self) -> dict[int, float]:
        """The nodes whose channel to the supervisor has said nothing for longer than it should
        (``CHANNEL_SILENT_S``), by node rank, with how long. Their ranks' heartbeats come through
        that channel, so they are as old as its silence: no signal, not a hang. {} where the
        heartbeats are read without a channel (the run folder)."""
        ...


class AttemptHandle(AttemptObservation, Protocol):
    @property
    def ref(self) -> str:
        """What identifies the attempt to its engine (a process group, a SLURM step)."""
        ...

    def close(self) -> None:
        """Release what watching the attempt held (a node channel's socket and thread), once
        the supervisor is done with it."""
        ...

    def poll(self) -> int | None:
        """The exit code once every node's launcher has ended, else None."""
        ...

    def stop(self, grace: float) -> None:
        """End every process of the attempt on every node: politely,
        then by force after ``grace``."""
        ...


class AttemptLauncher(Protocol):
    """One submission's attempts on one cluster kind."""

    @property
    def checkpoints(self) -> Storage:
        """Where the resume point is looked for before an attempt starts."""
        ...

    def launch(self, plan: LaunchPlan, artifacts: list[Artifact]) -> AttemptHandle:
        """Put the artifacts where the nodes read them and start the attempt."""
        ...

    def adopt(self, attempt: int, ref: str | None) -> AttemptHandle:
        """The attempt a supervisor that died had started (re-attach)."""
        ...

    def port_for_attempt(self, attempt: int) -> int | None:
        """The rendezvous port, where the kind picks one at launch; None: the plan's."""
        ...

    def machines(self, attempt: int, say: Callable[[str], None]) -> tuple[str, ...]:
        """Have the machines for ``attempt`` ready (a preempted TPU VM deleted and created again),
        and return their addresses where the kind finds them only now (``PlanContext.workers``); ()
        where the profile or the scheduler names them. ``say``: records what was done, as the job's
        events. A FsdpOrchError when there are none to run on."""
        ...

    def leaves_out_nodes(self) -> bool:
        """Whether the next attempt can run without a node of this one, on one held in reserve
        (SLURM's spare nodes, SSH hosts listed beyond the job's nodes): a straggler under
        ``watch.stragglers: replace`` is then left out. False where every node is needed."""
        ...

    def job_ending(self) -> None:
        """The job ends (succeeded, failed or cancelled, before that is recorded): stop what the
        kind keeps between attempts (local and SSH hosts: the next attempt's warm keepers). Nothing
        where the kind's keepers end by themselves (SLURM: with the allocation)."""
        ...

    def requeue_without(self, left_out: tuple[str, ...]) -> Callable[[], str] | None:
        """Where the next attempt cannot be placed on what is left of the machines (no spare node
        left) but the scheduler can find others: what sends the job back through the queue without
        ``left_out`` (it returns the new backend reference); None where the kind has no such way."""
        ...


class ClusterKind(PlanningKind[P], Protocol[P]):
    """Everything fsdp-orch knows about one kind of cluster, ``P`` being its profile model. Subclass
    it explicitly, naming that model (``class SlurmKind(ClusterKind[SlurmProfile])``),
    to inherit the defaults (an allocation that never ends early) and ``profile_of``."""

    def profile_of(self, holder: Submission | LaunchPlan) -> P:
        """The profile of a submission or plan of this kind, as the kind's own model (they hold any
        kind's, as ``ProfileBase``); a FsdpOrchError when it is another kind's."""
        profile = holder.profile
        if not isinstance(profile, self.profile_model):
            raise FsdpOrchError(f"cluster kind {self.name!r} was given a profile of kind "
                                f"{profile.kind!r} ({type(profile).__name__}); "
                                f"expected a {self.profile_model.__name__}")
        return profile

    def attempt_launcher(self, submission: Submission) -> AttemptLauncher:
        ...

    def start(self, index: JobIndex, submission: Submission, first: PlannedAttempt) -> None:
        """Begin supervising a recorded job (in the background); ``first``: its first attempt's
        plan and artifacts as recorded at submit, which a kind that starts from them (SLURM's
        batch script) starts exactly."""
        ...

    def cancel(self, index: JobIndex, row: JobStatus) -> str:
        """End the job everywhere; returns the line to print."""
        ...

    def refresh(self, index: JobIndex, rows: list[JobStatus]) -> list[str]:
        """Settle this kind's active jobs at status time: what the scheduler knows and a dead
        supervisor cannot report. ``rows``: the jobs something was started for whose supervisor is
        not alive on this machine (``liveness.needs_settling``). Returns the ids it changed."""
        ...

    def doctor(self, profile: P, torch_version: str | None, run: Runner) -> list[Check]:
        """What a job on a cluster of this kind needs, checked (``fsdp-orch doctor --cluster``);
        ``torch_version``: the submit host's."""
        return []

    def allocation_ending(self) -> bool:
        """Is the scheduler taking the allocation this process runs
        in away (requeue, preemption)?"""
        return False

    def gpu_memory(self, profile: P, run: Runner) -> tuple[int | None, str | None]:
        """Each GPU's memory as the cluster says it, for a profile that does not (``fit``'s
        verdict): bytes, and a line saying where it came from or why there is none; (None, None)
        where this kind has no way to ask."""
        return None, None


class AllocationEnding(Exception):
    """The scheduler is taking the allocation away (requeue, preemption, time limit): the next
    allocation goes on with the next attempt; restarting inside this one would be lost work.
    ``requeue``, when given, asks the scheduler for that next allocation (after it was warned ahead,
    as SLURM's signal before the time limit does). ``checkpoint_within``:
    seconds the running attempt may take to save a checkpoint first (0: no time for one)."""

    def __init__(self, evidence: str, requeue: Any = None, checkpoint_within: float = 0.0):
        super().__init__(evidence)
        self.evidence = evidence
        self.requeue = requeue
        self.checkpoint_within = checkpoint_within
