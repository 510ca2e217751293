"""What planning takes besides the job spec and the profile: the caller's ``PlanContext`` (the job's
id, attempt, folders, what to resume from), and the ``Placement`` a cluster kind's planning hook
(``KindPlanning``) decides. Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

from fsdp_orch.jobspec.profiles import ProfileBase
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.vocab.errors import InputError


@dataclass(frozen=True)
class PlanContext:
    """What planning needs besides the spec and profile; all of it chosen by the caller."""

    job_id: str
    attempt: int
    run_root: str  # the folder whose runs/ holds the job's run folder, as the nodes see it
    job_dir: str  # directory of job.yaml: relative paths in the spec start here
    resume_from: str | None = None
    resume_step: int | None = None  # the step of resume_from, when its layout tells it
    rdzv_port: int | None = None  # None: derived from job id and attempt
    local_has_gpu: bool = False  # resolves a local profile's device: auto
    bootstrap_dir: str | None = None  # fsdp_orch/bootstrap/site on the nodes; None: no bootstrap
    supervisor_command: tuple[str, ...] | None = None  # the supervisor's argv, less the job id
    # Hosts ("address:port") lost in earlier attempts: a kind that can plan around them does
    # (the SSH kind takes the next listed host, or fewer nodes within ``nodes: MIN-MAX``).
    excluded_hosts: tuple[str, ...] = ()
    # The addresses of the machines the attempt runs on, where the kind finds them only at launch (a
    # TPU VM's workers, from gcloud's describe), by worker index; () when unknown (render).
    workers: tuple[str, ...] = ()
    # A warm start (``submit --init-from``): the checkpoint whose weights the job starts from while
    # it has none of its own, and whether its optimizer state comes too.
    init_from: str | None = None
    init_step: int | None = None
    init_optimizer: bool = False
    # The job keeps its checkpoints in a folder of its own (<checkpoint dir>/<job id>): a warm start
    # or a scheduled run must not resume the run before it from a shared folder.
    checkpoint_per_job: bool = False
    # The job's time between failures so far (supervise: vocab.save_interval.observed_mtbf), for
    # the runtime's ``checkpoint.interval: auto``; None before its first failure (no variable set).
    mtbf_s: float | None = None


def host_port(address: str, port: int) -> str:
    """How a host is named in ``PlanContext.excluded_hosts`` (whatever user logs in to it)."""
    return f"{address}:{port}"


@dataclass(frozen=True)
class NodeTarget:
    """One node of an ssh cluster, with the literal rank it gets."""

    rank: int
    address: str
    port: int
    user: str | None
    identity_file: str | None


@dataclass(frozen=True)
class Placement:
    """What a cluster kind decides for planning: how many nodes and ranks, on what device, where the
    rendezvous runs and where the job's relative paths start on the nodes."""

    nnodes: int
    nproc_per_node: int
    device: str  # cpu, cuda or tpu
    rdzv_host: str | None  # None: the first node of the allocation, known only at run time
    rdzv_port: int | None = None  # None: derived from the job id and attempt
    workdir_base: str | None = None  # None or empty: the directory of job.yaml
    # The nodes do not see the submitter's run folder (SSH hosts with their own disks): they keep
    # the job's run folder under this folder of their own, with copies of fsdp_orch (lib/) and of
    # the job's folder (code/, where the job's relative paths start).
    own_run_root: str | None = None
    nodes: tuple[NodeTarget, ...] = ()
    # The kind warns before it takes the nodes away (SLURM's signal before the time limit): the
    # runtime saves a checkpoint when the supervisor asks (FSDP_ORCH_CHECKPOINT_REQUEST).
    checkpoint_on_request: bool = False
    # The kind's launch scripts can start ranks from a warm standby (``fsdp_orch/standby``); from
    # keepers a keeper host on each node keeps ready (``standby_hosted``).
    standby: bool = False
    standby_hosted: bool = False
    standby_cold_because: str = ""  # why the kind starts this job cold (default: not built)
    # Nodes allocated beyond ``nnodes`` for later attempts (SLURM's spare_nodes), and the
    # scheduler's names of the nodes this attempt runs on, where the kind chose them (() : all).
    spare_nodes: int = 0
    node_names: tuple[str, ...] = ()


# A kind's own profile model, which its place() takes (contravariant: a hook that takes any profile
# serves every kind).
P_contra = TypeVar("P_contra", bound=ProfileBase, contravariant=True)


class KindPlanning(Protocol[P_contra]):
    """The planning hook of a cluster kind (its node-count rules, device, rendezvous and workdir),
    for the kind's own profile model."""

    def place(self, job: JobSpec, profile: P_contra, cluster: str, ctx: PlanContext) -> Placement:
        """Raises InputError (with ``field``) when the job cannot run on this cluster."""
        ...


def fixed_node_count(job: JobSpec, why: str) -> None:
    """For kinds that cannot go on with fewer nodes: refuse an elastic ``nodes: MIN-MAX``."""
    if job.min_nodes < job.nodes:
        raise InputError(f"{job.nodes_text} is an elastic range, but {why}; expected a node count "
                         f"(nodes: {job.nodes})", field="nodes")


__all__ = ["KindPlanning", "NodeTarget", "PlanContext", "Placement", "fixed_node_count",
           "host_port"]
