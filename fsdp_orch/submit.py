"""From a job file and a cluster name to a plan (pure) and to a submitted job (doing)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from fsdp_orch.errors import InputError
from fsdp_orch.plan import LaunchPlan, PlanContext, make_plan, spec_json
from fsdp_orch.profiles import Profile, ProfileRef, load_profile
from fsdp_orch.render import Artifact, render_plan
from fsdp_orch.resources import bootstrap_site_dir, home, local_has_gpu
from fsdp_orch.spec import JobSpec, load_job


@dataclass(frozen=True)
class PlannedJob:
    job: JobSpec
    profile: Profile
    profile_ref: ProfileRef
    plan: LaunchPlan
    artifacts: list[Artifact]
    job_file: Path


def plan_job(job_file: Path, cluster: str, *, overrides: list[str] | None = None,
             accelerate_config: str | None = None, job_id: str = "JOBID", attempt: int = 0,
             resume_from: str | None = None, rdzv_port: int | None = None,
             home_dir: Path | None = None) -> PlannedJob:
    """Load and validate everything, then plan and render. Raises InputError; writes nothing."""
    job, doc = load_job(job_file, overrides, Path(accelerate_config) if accelerate_config else None)
    profile, ref = load_profile(cluster)
    template = None
    if profile.template:
        template = (ref.path.parent / profile.template).expanduser()
    ctx = PlanContext(job_id=job_id, attempt=attempt, home=str(home_dir or home()),
                      job_dir=str(job_file.resolve().parent), resume_from=resume_from,
                      rdzv_port=rdzv_port, local_has_gpu=local_has_gpu(),
                      bootstrap_dir=str(bootstrap_site_dir()))
    try:
        plan = make_plan(job, profile, ref.name, ctx)
    except InputError as exc:
        line = doc.line_of((exc.field,)) if exc.field else None
        raise InputError(exc.detail, file=str(job_file), field=exc.field, line=line) from None
    artifacts = render_plan(plan, profile_template=template)
    if profile.kind == "slurm":
        artifacts.append(_submitit_artifact(job, profile, ref, ctx))
    return PlannedJob(job, profile, ref, plan, artifacts, job_file)


def _submitit_artifact(job: JobSpec, profile: Profile, ref: ProfileRef, ctx: PlanContext) -> Artifact:
    """SLURM submissions go through submitit: its batch script runs the fsdp-orch supervisor on the
    first node, which runs node.sh as one job step per attempt."""
    from fsdp_orch.backends.base import Submission
    from fsdp_orch.backends.slurm import SUBMITIT_DIR, batch_script

    sub = Submission(job_id=ctx.job_id, cluster=ref.name, job=job, profile=profile, job_dir=ctx.job_dir,
                     home=ctx.home)
    return Artifact(str(sub.run_dir / SUBMITIT_DIR / "sbatch-submitit.sh"), batch_script(sub), True)


def spec_hash(plan: LaunchPlan) -> str:
    return hashlib.sha256(spec_json(plan).encode()).hexdigest()[:16]


def record_submission(store, job_file: Path, cluster: str, *, overrides: list[str] | None = None,  # type: ignore[no-untyped-def]
                      accelerate_config: str | None = None, idempotency_key: str | None = None,
                      home_dir: Path | None = None):
    """Validate and plan, record the job in the store and freeze its submission in the run dir.
    Returns (job id, created, submission); nothing is started."""
    from fsdp_orch.backends.base import Submission

    planned = plan_job(job_file, cluster, overrides=overrides, accelerate_config=accelerate_config,
                       home_dir=home_dir)
    root = home_dir or home()
    job_id, created = store.create_job(
        name=planned.job.name, cluster=planned.profile_ref.name, kind=planned.profile.kind,
        spec_json=spec_json(planned.plan), run_dir_root=root / "runs", job_file=str(job_file.resolve()),
        spec_hash=spec_hash(planned.plan), idempotency_key=idempotency_key)
    if not created:
        return job_id, False, None
    template = planned.profile.template
    submission = Submission(
        job_id=job_id, cluster=planned.profile_ref.name, job=planned.job, profile=planned.profile,
        job_dir=str(job_file.resolve().parent), home=str(root),
        profile_template=str((planned.profile_ref.path.parent / template).expanduser()) if template else None)
    submission.save()
    return job_id, True, submission


def submit(store, job_file: Path, cluster: str, *, overrides: list[str] | None = None,  # type: ignore[no-untyped-def]
           accelerate_config: str | None = None, idempotency_key: str | None = None,
           home_dir: Path | None = None) -> tuple[str, bool]:
    """Validate, record the job, hand it to its backend. Returns (job id, created)."""
    from fsdp_orch.backends import backend_for_kind
    from fsdp_orch.states import JobState

    job_id, created, submission = record_submission(
        store, job_file, cluster, overrides=overrides, accelerate_config=accelerate_config,
        idempotency_key=idempotency_key, home_dir=home_dir)
    if not created:
        return job_id, False
    try:
        backend_for_kind(submission.profile.kind).start(store, submission)
    except BaseException as exc:
        store.set_state(job_id, JobState.FAILED, reason=f"could not start: {exc}")
        raise
    return job_id, True


def cancel(store, job_id: str) -> str:  # type: ignore[no-untyped-def]
    from fsdp_orch.backends import backend_for_kind
    from fsdp_orch.errors import JobNotFound

    row = store.job(job_id)
    if row is None:
        raise JobNotFound(job_id)
    return backend_for_kind(row["kind"]).cancel(store, row)
