"""Planning: job spec + cluster profile + attempt context -> a LaunchPlan. Pure: no I/O, no clock.

Every derived number (node count, world size, rendezvous endpoint and id, the attempt, the
checkpoint to resume from) is computed here once; templates only print it.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fsdp_orch.checkpoints.globs import fixed_folder
from fsdp_orch.jobspec.profiles import ProfileBase
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.jobspec.secrets import SecretRef, plain, references
from fsdp_orch.launch.plan_inputs import KindPlanning, NodeTarget, Placement, PlanContext
from fsdp_orch.launch.start_choices import (
    accelerate_distributed_type,
    standby_choice,
    trainer_fsdp_notices,
)
from fsdp_orch.observe.nccl_env import missing_defaults, nccl_env_defaults
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.redact import MASK, secret_name, shown_env, shown_headers
from fsdp_orch.vocab.save_interval import OBSERVED_MTBF_ENV

# Below Linux's ephemeral range (32768-60999), where outgoing connections would hold ports.
RDZV_PORT_RANGE = (20000, 32000)
# The variables of ``LaunchPlan.env`` that hold paths: a leading ``~/`` in them means the home
# directory of the node that runs the script (a remote_workdir of ~/work), so the scripts
# export them with ``~`` expanded. Every other value reaches the program exactly as written.
CHECKPOINT_REQUEST_FILE = "checkpoint-request"
# In checkpoint.dir and the program's arguments: the job's id (an unchanged script's output folder
# of its own, so a scheduled or warm-started run never resumes the run before it).
JOB_ID_PLACEHOLDER = "{job_id}"
# Inside the run folder of a node with its own disk: the copies of
# fsdp_orch and of the job's folder.
OWN_DISK_PACKAGE = "lib"
OWN_DISK_CODE = "code"
PATH_ENV = frozenset({"FSDP_ORCH_RUN_DIR", "FSDP_ORCH_ATTEMPT_DIR", "FSDP_ORCH_SPEC",
                      "FSDP_ORCH_CHECKPOINT_REQUEST", "FSDP_ORCH_CHECKPOINT_DIR",
                      "FSDP_ORCH_RESUME", "FSDP_ORCH_RESUME_FROM", "FSDP_ORCH_INIT_FROM",
                      "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"})
# The kind of the job's event (a notice) that records one of ``LaunchPlan.notices``.
LAUNCH_CHANGED = "launch_changed"


@dataclass(frozen=True)
class LaunchPlan:
    job: JobSpec
    profile: ProfileBase
    cluster: str
    job_id: str
    attempt: int
    launcher: str
    device: str  # cpu, cuda or tpu
    nnodes: int
    nproc_per_node: int
    world_size: int
    rdzv_id: str
    rdzv_host: str | None  # None: the first node of the allocation, known only at run time
    rdzv_port: int
    python: str
    workdir: str
    run_dir: str
    attempt_dir: str
    checkpoint_dir: str
    spec_path: str
    resume_from: str | None
    program: list[str]  # what the launcher runs on each rank: script/module/command + args
    env: list[tuple[str, str]] = field(default_factory=list)
    # Variables whose values came by reference (``{from_env:}``, ``{from_file:}``): (name, where
    # from). The scripts never hold them; every node's environment is handed them (places/secrets).
    secret_env: list[tuple[str, str]] = field(default_factory=list)
    nodes: tuple[NodeTarget, ...] = ()
    spare_nodes: int = 0  # Placement.spare_nodes
    node_names: tuple[str, ...] = ()  # Placement.node_names
    accelerate_config_path: str | None = None
    bootstrap_dir: str | None = None  # put first on every rank's PYTHONPATH
    checkpoint_file: str | None = None  # checkpoint.file resolved: a path or glob, {step} kept
    # $FSDP_ORCH_HOME, or the profile's shared_dir; on own-disk hosts, their folder
    run_root: str = ""
    # a copy of fsdp_orch the nodes import (hosts with their own disks)
    package_dir: str | None = None
    supervisor_command: tuple[str, ...] | None = None  # where a kind runs the supervisor on a node
    accelerate_distributed_type: str | None = None  # the accelerate config's (launcher: accelerate)
    # Where the launch turns a setting of the user's into something else, one line each, said by
    # submit and render and recorded as the job's ``launch_changed`` events.
    notices: tuple[str, ...] = ()
    # Whether each attempt's ranks start from a warm standby, and why
    # (or why not), said by ``render``.
    standby: bool = False
    standby_reason: str = ""
    # The keepers are kept ready by a keeper host on each node (SLURM: ``standby.host``), not
    # prepared by the attempt before.
    standby_hosted: bool = False

    @property
    def entry_kind(self) -> str:
        return self.job.entry[0]


def slug(name: str) -> str:
    """A filesystem- and scheduler-safe form of a job name (the name itself is kept verbatim)."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return text[:60] or "job"


def rendezvous_port(job_id: str, attempt: int) -> int:
    """A port per job and attempt, spread over the range so concurrent jobs rarely collide."""
    digest = hashlib.sha256(f"{job_id}/{attempt}".encode()).digest()
    low, high = RDZV_PORT_RANGE
    return low + int.from_bytes(digest[:4], "big") % (high - low)


def _join(base: str, path: str) -> str:
    expanded = path
    if posixpath.isabs(expanded) or expanded.startswith("~"):
        return posixpath.normpath(expanded) if not expanded.startswith("~") else expanded
    return posixpath.normpath(posixpath.join(base, expanded))


def attempt_dir_of(run_dir: str, attempt: int) -> str:
    return posixpath.join(run_dir, f"attempt-{attempt}")


def make_plan(job: JobSpec, profile: ProfileBase, cluster: str, ctx: PlanContext,
              kind: KindPlanning[Any]) -> LaunchPlan:
    if job.launcher not in profile.launchers:
        raise InputError(
            f"launcher {job.launcher!r} cannot run on cluster {cluster!r} (kind {profile.kind}); "
            f"expected one of: {', '.join(profile.launchers)}", field="launcher")
    place = kind.place(job, profile, cluster, ctx)
    if job.spare_nodes and place.spare_nodes != job.spare_nodes:
        raise InputError(f"spare_nodes is for SLURM allocations, not cluster {cluster!r} (kind "
                         f"{profile.kind}); expected no spare_nodes (on ssh, list more hosts than "
                         "nodes: a lost host's place is taken by the next one listed)",
                         field="spare_nodes")
    if job.watch.stragglers == "replace" and profile.spare_nodes_for(job) < 1:  # issue 61
        raise InputError(f"replace needs a spare node to run the next attempt on, and cluster "
                         f"{cluster!r} (kind {profile.kind}) has none for this job; expected "
                         "spare_nodes: 1 or more (SLURM), SSH hosts listed beyond the job's nodes, "
                         "or watch.stragglers: report", field="watch.stragglers")
    paths = _node_paths(job, ctx, place)
    checkpoint_dir, checkpoint_file = _checkpoint_paths(job, ctx, paths.workdir)
    rdzv_port = ctx.rdzv_port or place.rdzv_port or rendezvous_port(ctx.job_id, ctx.attempt)
    nnodes, nproc, device = place.nnodes, place.nproc_per_node, place.device
    program = _program(job, ctx)
    accel_path = (posixpath.join(paths.attempt_dir, "accelerate_config.yaml")
                  if job.launcher == "accelerate" else None)
    accel_type, notices = accelerate_distributed_type(job.launcher, device)
    notices += trainer_fsdp_notices(job, device)
    standby, standby_reason = standby_choice(job, profile.kind, place.standby,
                                             hosted=place.standby_hosted,
                                             cold_because=place.standby_cold_because)
    spec_env = {**profile.env, **job.env}  # the job's own value of a variable wins
    env = _rank_env(job, ctx, place, paths, checkpoint_dir, spec_env)
    secret_env = [(name, ref.source) for name, ref in references(spec_env).items()]
    return LaunchPlan(
        job=job, profile=profile, cluster=cluster, job_id=ctx.job_id, attempt=ctx.attempt,
        launcher=job.launcher, device=device, nnodes=nnodes, nproc_per_node=nproc,
        world_size=nnodes * nproc, rdzv_id=f"{ctx.job_id}-a{ctx.attempt}",
        rdzv_host=place.rdzv_host, rdzv_port=rdzv_port, python=profile.python,
        workdir=paths.workdir, run_dir=paths.run_dir, attempt_dir=paths.attempt_dir,
        checkpoint_dir=checkpoint_dir, checkpoint_file=checkpoint_file, spec_path=paths.spec_path,
        resume_from=ctx.resume_from, program=program, env=env, secret_env=secret_env,
        nodes=place.nodes, spare_nodes=place.spare_nodes, node_names=place.node_names,
        accelerate_config_path=accel_path,
        bootstrap_dir=paths.bootstrap_dir, run_root=paths.run_root, package_dir=paths.package_dir,
        supervisor_command=ctx.supervisor_command, accelerate_distributed_type=accel_type,
        notices=notices, standby=standby, standby_reason=standby_reason,
        standby_hosted=standby and place.standby_hosted,
    )


@dataclass(frozen=True)
class _NodePaths:
    """Where an attempt's folders are, as the nodes see them."""

    run_root: str
    run_dir: str
    attempt_dir: str
    spec_path: str
    package_dir: str | None  # the nodes' copy of fsdp_orch, on hosts with their own disks
    bootstrap_dir: str | None
    workdir: str


def _node_paths(job: JobSpec, ctx: PlanContext, place: Placement) -> _NodePaths:
    """The run folder under the run root (the nodes' own, with copies of fsdp_orch and of the job's
    folder, where they have their own disks), and the job's workdir."""
    run_root = place.own_run_root or ctx.run_root
    run_dir = posixpath.join(run_root, "runs", ctx.job_id)
    package_dir, bootstrap_dir, workdir_base = None, ctx.bootstrap_dir, place.workdir_base
    if place.own_run_root:
        package_dir = posixpath.join(run_dir, OWN_DISK_PACKAGE)
        bootstrap_dir = (posixpath.join(package_dir, "fsdp_orch", "bootstrap", "site")
                         if ctx.bootstrap_dir else None)
        workdir_base = posixpath.join(run_dir, OWN_DISK_CODE)
    if workdir_base:
        workdir = _join(workdir_base, job.workdir) if job.workdir != "." else workdir_base
    else:
        workdir = _join(ctx.job_dir, job.workdir)
    return _NodePaths(run_root, run_dir, attempt_dir_of(run_dir, ctx.attempt),
                      posixpath.join(run_dir, "job.json"), package_dir, bootstrap_dir, workdir)


def _checkpoint_paths(job: JobSpec, ctx: PlanContext, workdir: str) -> tuple[str, str | None]:
    """The job's checkpoint folder, and its checkpoint file where it writes one file per
    checkpoint."""
    written = job.checkpoint.dir
    if job.checkpoint.file:  # one file per checkpoint: its folder is the checkpoint folder
        checkpoint_file = _join(workdir,
                                job.checkpoint.file.replace(JOB_ID_PLACEHOLDER, ctx.job_id))
        return fixed_folder(checkpoint_file), checkpoint_file
    if written:  # the user's folder; {job_id} in it (and in the args) keeps runs apart
        return _join(workdir, written.replace(JOB_ID_PLACEHOLDER, ctx.job_id)), None
    checkpoint_dir = _join(workdir, posixpath.join("checkpoints", slug(job.name)))
    if ctx.checkpoint_per_job:
        checkpoint_dir = posixpath.join(checkpoint_dir, ctx.job_id)
    return checkpoint_dir, None


def _program(job: JobSpec, ctx: PlanContext) -> list[str]:
    """What the launcher runs on each rank: the script, module or command with its arguments
    ({job_id} filled in), then the resume or warm-start arguments."""
    entry_form, _ = job.entry
    if entry_form == "script":
        program = [job.script or "", *job.args]
    elif entry_form == "module":
        program = [job.module or "", *job.args]
    else:
        program = [*(job.command or []), *job.args]
    program = [arg.replace(JOB_ID_PLACEHOLDER, ctx.job_id) for arg in program]
    return program + resume_arguments(job, ctx) + init_arguments(job, ctx)


def _rank_env(job: JobSpec, ctx: PlanContext, place: Placement, paths: _NodePaths,
              checkpoint_dir: str,
              spec_env: Mapping[str, str | SecretRef]) -> list[tuple[str, str]]:
    """The variables every rank gets: the spec's plain ones, fsdp-orch's, NCCL's defaults on
    GPUs."""
    env = [
        *plain(spec_env).items(),
        ("FSDP_ORCH_JOB_ID", ctx.job_id),
        ("FSDP_ORCH_JOB_NAME", job.name),
        ("FSDP_ORCH_ATTEMPT", str(ctx.attempt)),
        ("FSDP_ORCH_RUN_DIR", paths.run_dir),
        ("FSDP_ORCH_ATTEMPT_DIR", paths.attempt_dir),
        ("FSDP_ORCH_SPEC", paths.spec_path),
        ("FSDP_ORCH_CHECKPOINT_DIR", checkpoint_dir),
        ("FSDP_ORCH_RESUME", ctx.resume_from or job.checkpoint.resume),
        ("FSDP_ORCH_COLLECTIVE_TIMEOUT", f"{job.watch.collective_timeout:g}"),
    ]
    if place.checkpoint_on_request:
        env.append(("FSDP_ORCH_CHECKPOINT_REQUEST",
                    posixpath.join(paths.attempt_dir, CHECKPOINT_REQUEST_FILE)))
    if ctx.resume_from:
        env.append(("FSDP_ORCH_RESUME_FROM", ctx.resume_from))
        if ctx.resume_step is not None:
            env.append(("FSDP_ORCH_RESUME_STEP", str(ctx.resume_step)))
    if ctx.init_from and not ctx.resume_from:
        env += [("FSDP_ORCH_INIT_FROM", ctx.init_from),
                ("FSDP_ORCH_INIT_OPTIMIZER", "1" if ctx.init_optimizer else "0")]
    if ctx.mtbf_s is not None:
        env.append((OBSERVED_MTBF_ENV, f"{ctx.mtbf_s:.1f}"))
    if place.device == "cuda":
        env += missing_defaults(nccl_env_defaults(paths.attempt_dir), dict(env)).items()
    if job.launcher == "xla":
        env.append(("PJRT_DEVICE", place.device.upper()))
    if job.launch.umask is not None:  # set in the training processes (bootstrap.user_umask)
        env.append(("FSDP_ORCH_UMASK", job.launch.umask))
    return env


def resume_arguments(job: JobSpec, ctx: PlanContext) -> list[str]:
    """``checkpoint.resume_args`` with the checkpoint filled in;
    none when there is nothing to resume."""
    if not ctx.resume_from or not job.checkpoint.resume_args:
        return []
    step = "" if ctx.resume_step is None else str(ctx.resume_step)
    return [arg.replace("{checkpoint}", ctx.resume_from).replace("{step}", step)
            for arg in job.checkpoint.resume_args]


def init_arguments(job: JobSpec, ctx: PlanContext) -> list[str]:
    """``checkpoint.init_args`` with the warm start's checkpoint filled in,
    while the job has nothing of its own to resume."""
    if not ctx.init_from or ctx.resume_from or not job.checkpoint.init_args:
        return []
    step = "" if ctx.init_step is None else str(ctx.init_step)
    return [arg.replace("{checkpoint}", ctx.init_from).replace("{step}", step)
            for arg in job.checkpoint.init_args]


def shown_plan(plan: LaunchPlan) -> LaunchPlan:
    """``plan`` as ``render`` shows it: plain values of secret-named variables and headers masked
    (references show only where their values come from; their values are never in a plan)."""
    from dataclasses import replace

    job = plan.job.model_copy(update={
        "env": shown_env(plan.job.env),
        "notify": [hook.model_copy(update={"headers": shown_headers(hook.headers)})
                   for hook in plan.job.notify]})
    return replace(plan, job=job,
                   env=[(name, MASK if secret_name(name) else value) for name, value in plan.env])


def spec_json(plan: LaunchPlan) -> str:
    """The resolved spec the runtime reads (``FSDP_ORCH_SPEC``), stable key order."""
    import json

    data = plan.job.model_dump(mode="json")
    data["_resolved"] = {"checkpoint_dir": plan.checkpoint_dir, "world_size": plan.world_size,
                         "nnodes": plan.nnodes, "nproc_per_node": plan.nproc_per_node,
                         "cluster": plan.cluster, "job_id": plan.job_id}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


__all__ = ["LAUNCH_CHANGED", "LaunchPlan", "attempt_dir_of", "init_arguments", "make_plan",
           "resume_arguments", "slug", "rendezvous_port"]
