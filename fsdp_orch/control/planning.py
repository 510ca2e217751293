"""From a job file and a cluster name to a submission, its plan and its artifacts; from a submit
request to that plan with the values its references point at. Pure but for reading files: nothing
is opened for writing, so bad input exits 2 having written nothing (not even the index)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from fsdp_orch.backends.registry import cluster_kind, load_profile
from fsdp_orch.control.submit_request import SubmitRequest
from fsdp_orch.control.warm_start import InitSource
from fsdp_orch.jobspec.loading import load_job
from fsdp_orch.jobspec.profiles import ProfileRef
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.jobspec.secrets import resolve_submission
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.render import Artifact, own_template_dirs
from fsdp_orch.launch.submission import AttemptInputs, PlannedAttempt, Submission
from fsdp_orch.places.builtin import home, local_has_gpu
from fsdp_orch.record.run_roots import shared_run_root
from fsdp_orch.supervise import supervisor_command
from fsdp_orch.vocab.errors import InputError


def new_job_id() -> str:
    """A job's id, drawn before its first plan (drawing it writes nothing)."""
    return os.urandom(6).hex()


@dataclass(frozen=True)
class PlannedJob:
    submission: Submission
    profile_ref: ProfileRef
    plan: LaunchPlan
    artifacts: list[Artifact]
    job_file: Path

    @property
    def first(self) -> PlannedAttempt:
        """What the kind starts: the plan recorded at submit, exactly."""
        return PlannedAttempt(self.plan, self.artifacts)


def plan_job(job_file: Path, cluster: str, *, overrides: list[str] | None = None,
             accelerate_config: str | None = None, job_id: str | None = None,
             attempt: int = 0, resume_from: str | None = None, rdzv_port: int | None = None,
             home_dir: Path | None = None, init: InitSource | None = None,
             init_optimizer: bool = False, checkpoint_per_job: bool = False) -> PlannedJob:
    """Load and validate everything, then plan and render attempt ``attempt`` under ``job_id``
    (None: a new job's, drawn here). Raises InputError; writes nothing."""
    job, doc = load_job(job_file, overrides, Path(accelerate_config) if accelerate_config else None)
    job = with_user_umask(job)
    profile, ref = load_profile(cluster)
    template = (ref.path.parent / profile.template).expanduser() if profile.template else None
    shared = profile.shared_dir
    run_root = shared_run_root(shared) if shared else str(home_dir or home())
    if shared:
        check_shared_dir(run_root, str(ref.path))
    kind = cluster_kind(profile.kind)
    submission = Submission(
        job_id=job_id or new_job_id(), cluster=ref.name, job=job, profile=profile,
        job_dir=str(job_file.resolve().parent), run_root=run_root, kind=kind,
        # a kind whose supervisor runs on a node (SLURM: in the allocation) runs it on the
        # profile's python, as the ranks; the others, here, on the CLI's
        supervisor_command=supervisor_command(
            profile.python if getattr(kind, "supervisor_on_a_node", False) else None),
        profile_template=str(template) if template else None, template_dirs=own_template_dirs(),
        init_from=init.path if init else None, init_step=init.step if init else None,
        init_optimizer=init_optimizer,
        checkpoint_per_job=checkpoint_per_job or init is not None)
    try:
        plan = submission.plan_for(attempt, AttemptInputs(
            resume_from=resume_from, rdzv_port=rdzv_port, local_has_gpu=local_has_gpu()))
        artifacts = submission.render(plan)
    except InputError as exc:
        if exc.file is not None:
            raise
        line = doc.line_of((exc.field,)) if exc.field else None
        raise InputError(exc.detail, file=str(job_file), field=exc.field, line=line) from None
    return PlannedJob(submission, ref, plan, artifacts, job_file)


def with_user_umask(job: JobSpec) -> JobSpec:
    """``launch.umask`` as job.yaml sets it, else the user's (the umask submit runs with): recorded
    with the job, for its own program's files (``bootstrap.user_umask``)."""
    if job.launch.umask is not None:
        return job
    from fsdp_orch.bootstrap.user_umask import umask_text, user_umask

    launch = job.launch.model_copy(update={"umask": umask_text(user_umask())})
    return job.model_copy(update={"launch": launch})


@dataclass(frozen=True)
class PlannedSubmission:
    """A submit request planned (attempt 0, under the job id drawn for it), with the values its
    references point at: what submit records. ``init``: the warm start it was planned with."""

    job: PlannedJob
    env_values: dict[str, str]
    header_values: dict[str, dict[str, str]]
    init: InitSource | None = None
    # fsdp-orch fit's estimate from submit's check, recorded with the job (status shows it):
    # (each GPU's peak, its part in tensors, the GPUs' memory), in GiB
    fit_estimate: tuple[float, float, float | None] | None = None

    @property
    def plan(self) -> LaunchPlan:
        return self.job.plan

    @property
    def submission(self) -> Submission:
        return self.job.submission


def _plan_request(request: SubmitRequest, init: InitSource | None,
                  job_id: str | None = None) -> PlannedJob:
    return plan_job(request.job_file, request.cluster, overrides=list(request.overrides),
                    accelerate_config=request.accelerate_config, home_dir=request.home_dir,
                    job_id=job_id, init=init, init_optimizer=request.init_optimizer,
                    checkpoint_per_job=request.checkpoint_per_job)


def plan_submission(request: SubmitRequest, init: InitSource | None = None) -> PlannedSubmission:
    """What submit checks of the job, its profile and its references: the plan, and the values
    read from the environment and files. Raises InputError; writes nothing."""
    planned = _plan_request(request, init)
    env_values, header_values = resolve_submission(
        planned.submission.profile, planned.submission.job, os.environ, str(request.job_file),
        str(planned.profile_ref.path))
    check_here = getattr(planned.submission.kind, "check_here", None)  # kinds that run here
    if check_here is not None:
        check_here(planned.plan, str(request.job_file), str(planned.profile_ref.path))
        check_ranks_python(planned.plan.python, planned.profile_ref)
    check_checkpoint_folder(planned.plan, str(request.job_file))
    check_faults_met(planned)
    return PlannedSubmission(planned, env_values, header_values, init)


def check_faults_met(planned: PlannedJob) -> None:
    """A fault kind only fsdp_orch.runtime injects, asked of a script that does not use it, is
    refused (``control.entry_checks``): the job would end SUCCEEDED with no fault."""
    from fsdp_orch.control.entry_checks import read_entry, unmet_fault

    why = unmet_fault(dict(planned.plan.env),
                      read_entry(planned.plan.job, planned.submission.job_dir))
    if why is not None:
        raise InputError(why, file=str(planned.job_file), field="env.FSDP_ORCH_FAULT")


def check_ranks_python(python: str, ref: ProfileRef) -> None:
    """The ranks' python of a kind that runs them on this machine imports torch and fsdp_orch
    (``places.python_env``: found, not imported, in the time the interpreter takes to start). An
    InputError naming the python, what it lacks and the fix: such a job used to fail three times
    as ``unknown``."""
    from fsdp_orch.places.python_env import (
        is_this_python,
        ranks_python_problem,
        what_python_has,
    )

    where = (f"a profile of your own (./clusters/{ref.name}.yaml, or clusters/{ref.name}.yaml in "
             "FSDP_ORCH_HOME)" if ref.origin == "built-in" else str(ref.path))
    why = ranks_python_problem(what_python_has(python), where, cli_own=is_this_python(python))
    if why is not None:
        raise InputError(why, file=str(ref.path), field="python")


def check_shared_dir(run_root: str, profile_file: str) -> None:
    """The run folders under a ``shared_dir`` hold the scripts the nodes run as the user: where
    another account can rename or replace the user's folder in it (a folder others can write
    without the sticky bit), it is refused, naming the fix."""
    from fsdp_orch.places.trust import local_folder_problem

    why = local_folder_problem(run_root)
    if why is not None:
        raise InputError(f"refused {run_root} for the run folders: {why}; another account could "
                         "replace what the nodes run as you there: give the shared folder the "
                         "sticky bit (chmod +t, as /tmp has it), or use a folder of your own",
                         file=profile_file, field="shared_dir")


def check_checkpoint_folder(plan: LaunchPlan, job_file: str) -> None:
    """A job loads what is in its checkpoint folder (a DCP ``.metadata`` and a ``.pt`` are pickles:
    loading one can run code), so that folder follows the rule of ``places.trust``: yours or
    root's, writable by no one else, and so every folder above it. Where it is not made yet, the
    folder it will be made in. InputError naming it, its owner and mode, and what to do."""
    if plan.job.checkpoint.resume == "never":
        return
    from fsdp_orch.places.trust import local_folder_problem, refusal

    why = local_folder_problem(plan.checkpoint_dir)
    if why is not None:
        raise InputError(refusal("checkpoint folder", plan.checkpoint_dir, why,
                                 "a checkpoint there could have been planted by someone else; "
                                 "use a folder of yours (checkpoint.dir), and to start from a "
                                 "checkpoint there, copy it into that folder first"),
                         file=job_file, field="checkpoint.dir")


def warm_started(request: SubmitRequest, planned: PlannedSubmission,
                 init: InitSource) -> PlannedSubmission:
    """``planned`` starting from ``init``'s checkpoint. The warm start is part of the plan (its
    arguments, its env, the job's own checkpoint folder), and which checkpoint it is is known only
    once the index is open, after the plan that checked the request: so this plans once more, under
    the same job id. The references are not read again."""
    return replace(planned, job=_plan_request(request, init, planned.submission.job_id), init=init)


__all__ = ["PlannedJob", "PlannedSubmission", "plan_job", "new_job_id",
           "plan_submission", "warm_started"]
