"""The TPU VM kind: a Cloud TPU VM (pod slice) created with gcloud, one process per worker under
XLA. Planning and rendering only so far: ``render --cluster tpu-vm`` shows the create, launch and
per-worker scripts; ``submit`` says it is not implemented."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from fsdp_orch.backends.render_only import RenderOnly
from fsdp_orch.checks import Check
from fsdp_orch.command import Runner
from fsdp_orch.errors import InputError
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.plan import LaunchPlan, Placement, PlanContext, fixed_node_count
from fsdp_orch.profiles import ProfileBase
from fsdp_orch.render import Artifact, Templates


class TpuVmProfile(ProfileBase):
    kind: Literal["tpu-vm"]
    tpu_name: str = Field(min_length=1)
    zone: str = Field(min_length=1)
    project: str | None = None
    accelerator_type: str = Field(min_length=1)
    runtime_version: str = Field(min_length=1)
    spot: bool = False
    num_workers: int = Field(default=1, gt=0)
    remote_workdir: str = "~/work"
    setup: list[str] = Field(default_factory=list)
    launchers: ClassVar[tuple[str, ...]] = ("xla", "python")


class TpuVmKind(RenderOnly):
    name = "tpu-vm"
    profile_model = TpuVmProfile
    main_template = "tpu-vm-node.sh.j2"

    def place(self, job: JobSpec, profile: ProfileBase, cluster: str, ctx: PlanContext) -> Placement:
        assert isinstance(profile, TpuVmProfile)
        fixed_node_count(job, f"a TPU VM job runs on all {profile.num_workers} workers")
        if job.nodes not in (1, profile.num_workers):
            raise InputError(f"a TPU VM job runs on all {profile.num_workers} workers; "
                             f"expected nodes: 1 or {profile.num_workers}, got {job.nodes}", field="nodes")
        return Placement(nnodes=profile.num_workers, nproc_per_node=1, device="tpu", rdzv_host=None,
                         workdir_base=profile.remote_workdir)

    def doctor(self, profile: ProfileBase, torch_version: str | None, run: Runner) -> list[Check]:
        from fsdp_orch.backends.remote_doctor import tpu_checks

        return tpu_checks(profile, run)

    def artifacts(self, plan: LaunchPlan, templates: Templates) -> list[Artifact]:
        a = plan.attempt_dir
        return [Artifact(f"{a}/tpu-create.sh", templates("tpu-vm-create.sh.j2"), True),
                Artifact(f"{a}/tpu-launch.sh", templates("tpu-vm-launch.sh.j2"), True),
                Artifact(f"{a}/node.sh", templates(templates.main), True)]


KIND = TpuVmKind()
