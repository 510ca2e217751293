"""Planning and rendering in tests: the real planner with the kind the profile names."""

from __future__ import annotations

from fsdp_orch.backends.registry import cluster_kind
from fsdp_orch.jobspec.profiles import ProfileBase
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan import LaunchPlan, make_plan
from fsdp_orch.launch.plan_inputs import PlanContext
from fsdp_orch.launch.render import Artifact, render_plan
from fsdp_orch.supervise import SUPERVISOR_MODULE

# What golden files show as the supervisor's command (the real one names this machine's Python).
SUPERVISOR = ("python3", "-m", SUPERVISOR_MODULE)
CONTEXT = PlanContext(job_id="j", attempt=0, run_root="/h", job_dir="/j",
                      supervisor_command=SUPERVISOR)


def plan_on(job: JobSpec, profile: ProfileBase, cluster: str,
            ctx: PlanContext = CONTEXT) -> LaunchPlan:
    return make_plan(job, profile, cluster, ctx, cluster_kind(profile.kind))


def render(plan: LaunchPlan, **options: object) -> list[Artifact]:
    return render_plan(plan, cluster_kind(plan.profile.kind), **options)  # type: ignore[arg-type]


__all__ = ["CONTEXT", "SUPERVISOR", "plan_on", "render"]
