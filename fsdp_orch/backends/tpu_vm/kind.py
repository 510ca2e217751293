"""The TPU VM kind: a Cloud TPU VM (a pod slice), one process per worker under XLA (PJRT).

The supervisor runs detached on the submitting machine, as for SSH hosts. Before each attempt it
describes the TPU VM through gcloud (``tpu_gcloud``, ``tpu_lifecycle``): it waits for READY, and
where the profile owns the VM, creates it, or deletes and creates again one that was preempted. The
workers are then SSH hosts with their own disks, at the addresses ``describe`` gave: the job is
copied to each, started on all at once, and watched through the reports they send back over SSH
(``ssh_staging``, ``ssh_reports``, ``tpu_launcher``)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from fsdp_orch.backends.supervised_here import SupervisedHere
from fsdp_orch.backends.tpu_vm.gcloud import create_argv, delete_argv, describe_argv, prepare_argv
from fsdp_orch.jobspec.limits import MAX_NODES, MAX_SECONDS_SETTING, at_most
from fsdp_orch.jobspec.profiles import ProfileBase
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.plan_inputs import NodeTarget, Placement, PlanContext, fixed_node_count
from fsdp_orch.launch.render import Artifact, Templates
from fsdp_orch.launch.submission import Submission
from fsdp_orch.observe.command import Runner
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.checks import Check
from fsdp_orch.vocab.errors import InputError


class TpuVmProfile(ProfileBase):
    kind: Literal["tpu-vm"]
    tpu_name: str = Field(min_length=1, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    zone: str = Field(min_length=1, pattern=r"^[a-z0-9-]+$")
    project: str | None = Field(default=None, pattern=r"^[a-z0-9:.-]+$")
    accelerator_type: str = Field(min_length=1, pattern=r"^[a-z0-9-]+$")
    runtime_version: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    spot: bool = False
    num_workers: Annotated[int, at_most(MAX_NODES)] = Field(default=1, gt=0)
    # fsdp-orch creates the TPU VM when there is none, and deletes and creates it again when it was
    # preempted. False: someone else owns it; fsdp-orch only waits for it to be READY.
    owns_vm: bool = False
    # seconds an attempt waits for READY
    ready_timeout: Annotated[int, at_most(MAX_SECONDS_SETTING)] = Field(default=1800, gt=0)
    # TPU: torch_xla on the TPU. CPU, for workers with no TPU (the tests'): where the profile's
    # python has torch_xla, its CPU client (one worker: a world of one per process; the job's env
    # CPU_NUM_DEVICES gives it devices), else the plain CPU path (gloo).
    pjrt_device: Literal["TPU", "CPU"] = "TPU"
    # Each worker's own disk: the job's run folders go to <remote_workdir>/runs/<id>.
    remote_workdir: str = "/var/tmp/fsdp-orch"
    setup: list[str] = Field(default_factory=list)  # lines at the top of every worker's node script
    # run once on every worker of a TPU VM not used yet
    prepare: list[str] = Field(default_factory=list)
    # SSH to the workers, as `gcloud compute tpus tpu-vm ssh` does: its key, the local user.
    ssh_user: str | None = None
    ssh_key: str = "~/.ssh/google_compute_engine"
    ssh_port: int = Field(default=22, gt=0, lt=65536)
    address: Literal["internal", "external"] = "internal"  # which of describe's addresses to use
    # None: each TPU VM's worker keys are taken on first use and kept for that VM (a re-created VM
    # has new keys); a file: checked against it, with host_key_policy.
    known_hosts: str | None = None
    host_key_policy: Literal["strict", "accept-new", "warn"] = "accept-new"
    connect_timeout: Annotated[int, at_most(MAX_SECONDS_SETTING)] = Field(default=10, gt=0)
    launchers: ClassVar[tuple[str, ...]] = ("xla", "python")

    @field_validator("remote_workdir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("expected an absolute folder that every worker has "
                             "(fsdp-orch copies the job there)")
        return value


class TpuVmKind(SupervisedHere[TpuVmProfile]):
    name = "tpu-vm"
    profile_model = TpuVmProfile
    main_template = "tpu-vm-node.sh.j2"

    def place(self, job: JobSpec, profile: TpuVmProfile, cluster: str,
              ctx: PlanContext) -> Placement:
        fixed_node_count(job, f"a TPU VM job runs on all {profile.num_workers} workers")
        if job.nodes not in (1, profile.num_workers):
            raise InputError(f"a TPU VM job runs on all {profile.num_workers} workers; "
                             f"expected nodes: 1 or {profile.num_workers}, got {job.nodes}",
                             field="nodes")
        if ctx.workers and len(ctx.workers) != profile.num_workers:
            raise InputError(f"TPU VM {profile.tpu_name} has {len(ctx.workers)} workers; "
                             f"the profile says num_workers: {profile.num_workers}",
                             field="num_workers")
        nodes = tuple(NodeTarget(i, address, profile.ssh_port, profile.ssh_user, profile.ssh_key)
                      for i, address in enumerate(ctx.workers))
        return Placement(nnodes=profile.num_workers, nproc_per_node=1,
                         device=profile.pjrt_device.lower(),
                         rdzv_host=ctx.workers[0] if ctx.workers else None,
                         own_run_root=profile.remote_workdir, nodes=nodes)

    def attempt_launcher(self, submission: Submission) -> Any:
        from fsdp_orch.backends.tpu_vm.launcher import TpuVmLauncher

        return TpuVmLauncher(submission)

    def preflight(self, submission: Submission) -> None:
        """gcloud answers, and the TPU VM exists or the profile may create it."""
        from fsdp_orch.backends.tpu_vm.gcloud import next_action
        from fsdp_orch.backends.tpu_vm.lifecycle import TpuVm
        from fsdp_orch.vocab.errors import FsdpOrchError

        profile = self.profile_of(submission)
        action, why = next_action(TpuVm(profile).describe(), profile.owns_vm)
        if action == "fail":
            raise FsdpOrchError(why)

    def leftovers(self, job_id: str, row: JobStatus) -> bool:
        # the supervisor stops every worker's processes itself; stop_leftovers sweeps after it
        return False

    def stop_leftovers(self, job_id: str, row: JobStatus) -> None:
        """Every process of the job on every worker of the TPU VM as
        it is now (none if it is gone)."""
        from fsdp_orch.backends.tpu_vm.launcher import stop_on_workers

        stop_on_workers(Submission.load(Path(row.run_dir), self), job_id)

    def doctor(self, profile: TpuVmProfile, torch_version: str | None, run: Runner) -> list[Check]:
        from fsdp_orch.backends.remote_doctor import tpu_checks

        return tpu_checks(profile, run)

    def artifacts(self, plan: LaunchPlan, templates: Templates) -> list[Artifact]:
        profile = self.profile_of(plan)
        gcloud = {"describe": describe_argv(profile), "create": create_argv(profile),
                  "delete": delete_argv(profile), "prepare": prepare_argv(profile)}
        out = [Artifact(f"{plan.attempt_dir}/tpu-vm.sh",
                        templates("tpu-vm.sh.j2",
                                  gcloud={k: shlex.join(v) for k, v in gcloud.items()}), True)]
        for rank in range(plan.nnodes):
            out.append(Artifact(f"{plan.attempt_dir}/node-{rank}.sh",
                                templates(templates.main, rank=rank), True))
        return out


KIND = TpuVmKind()
