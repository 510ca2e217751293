"""From a job file and a cluster name to a submission, its plan and its artifacts. Pure but for
reading files: nothing is opened for writing, so bad input exits 2 having written nothing (not even
the index)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fsdp_orch.backends.registry import cluster_kind, load_profile
from fsdp_orch.control.warm_start import InitSource
from fsdp_orch.jobspec.loading import load_job
from fsdp_orch.jobspec.profiles import ProfileRef
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.render import Artifact
from fsdp_orch.launch.submission import Submission
from fsdp_orch.places.builtin import home, local_has_gpu
from fsdp_orch.record.run_roots import shared_run_root
from fsdp_orch.supervise import supervisor_command
from fsdp_orch.vocab.errors import InputError

# The job id a plan is made with before the job has one (submit draws it only once the plan is
# recorded; what it records is planned with this, so the same spec has the same spec hash).
PLACEHOLDER_JOB_ID = "JOBID"


@dataclass(frozen=True)
class PlannedJob:
    submission: Submission
    profile_ref: ProfileRef
    plan: LaunchPlan
    artifacts: list[Artifact]
    job_file: Path


def plan_job(job_file: Path, cluster: str, *, overrides: list[str] | None = None,
             accelerate_config: str | None = None, job_id: str = PLACEHOLDER_JOB_ID,
             attempt: int = 0, resume_from: str | None = None, rdzv_port: int | None = None,
             home_dir: Path | None = None, init: InitSource | None = None,
             init_optimizer: bool = False, checkpoint_per_job: bool = False) -> PlannedJob:
    """Load and validate everything, then plan and render. Raises InputError; writes nothing."""
    job, doc = load_job(job_file, overrides, Path(accelerate_config) if accelerate_config else None)
    profile, ref = load_profile(cluster)
    template = (ref.path.parent / profile.template).expanduser() if profile.template else None
    shared = profile.shared_dir
    run_root = shared_run_root(shared) if shared else str(home_dir or home())
    submission = Submission(
        job_id=job_id, cluster=ref.name, job=job, profile=profile,
        job_dir=str(job_file.resolve().parent), run_root=run_root, kind=cluster_kind(profile.kind),
        supervisor_command=supervisor_command(),
        profile_template=str(template) if template else None,
        init_from=init.path if init else None, init_step=init.step if init else None,
        init_optimizer=init_optimizer,
        checkpoint_per_job=checkpoint_per_job or init is not None)
    try:
        plan, artifacts = submission.plan(attempt, resume_from=resume_from, rdzv_port=rdzv_port,
                                          local_has_gpu=local_has_gpu())
    except InputError as exc:
        if exc.file is not None:
            raise
        line = doc.line_of((exc.field,)) if exc.field else None
        raise InputError(exc.detail, file=str(job_file), field=exc.field, line=line) from None
    return PlannedJob(submission, ref, plan, artifacts, job_file)


__all__ = ["PLACEHOLDER_JOB_ID", "PlannedJob", "plan_job"]
