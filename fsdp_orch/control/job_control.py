"""From a planned submission to a recorded, started job, and a job cancelled (doing). The plan is
made before (control/planning), and passed on: submit records what it planned."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

from fsdp_orch.backends.registry import cluster_kind
from fsdp_orch.checkpoints.single_file import FileLayout
from fsdp_orch.control.planning import PlannedSubmission, plan_submission, warm_started
from fsdp_orch.control.resubmit import (
    Choice,
    Existing,
    decide,
    existing_checkpoint,
    nothing_to_move,
    prune_previous,
    pruned_said,
    said,
    start_fresh,
)
from fsdp_orch.control.submit_request import SubmitRequest
from fsdp_orch.control.warm_start import resolve_init_from
from fsdp_orch.launch.plan import LaunchPlan, spec_json
from fsdp_orch.launch.submission import Submission
from fsdp_orch.notify.process import start_notifier
from fsdp_orch.places import secrets
from fsdp_orch.record.index import JobIndex
from fsdp_orch.vocab.errors import InputError, JobNotFound
from fsdp_orch.vocab.states import JobState

Say = Callable[[str], None]
# What a job's own id reads as in its spec hash (what jobs planned before their id was drawn
# were planned under: their hashes stay the same)
SPEC_HASH_JOB_ID = "JOBID"


def spec_hash(plan: LaunchPlan) -> str:
    """The same spec has the same hash whichever job it is: its own job id is left out."""
    spec = spec_json(plan).replace(plan.job_id, SPEC_HASH_JOB_ID)
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def _origin(request: SubmitRequest, planned: PlannedSubmission) -> dict[str, Any] | None:
    origin = dict(request.origin or {})
    init = planned.init
    if init is not None:
        origin.update(init_from=init.path, init_step=init.step,
                      **({"init_job": init.job_id} if init.job_id else {}))
    return origin or None


def _file_layout(planned: PlannedSubmission) -> FileLayout | None:
    plan, job = planned.plan, planned.submission.job
    if not plan.checkpoint_file:
        return None
    return FileLayout(os.path.expanduser(plan.checkpoint_file), job.checkpoint.step_key)


def _checkpoint_there(index: JobIndex, request: SubmitRequest, planned: PlannedSubmission,
                      ) -> tuple[Existing | None, Choice | None]:
    """The complete checkpoint already in the job's checkpoint folder, and what to do with it."""
    submission = planned.submission
    if submission.checkpoint_per_job or submission.job.checkpoint.resume != "auto":
        return None, None
    found = existing_checkpoint(planned.plan.checkpoint_dir, index.store.jobs(),
                                _file_layout(planned))
    return found, decide(found, request.checkpoint_choice, field="--resume/--fresh")


def _record(index: JobIndex, request: SubmitRequest, planned: PlannedSubmission) -> Submission:
    """The submission frozen in its run folder under the job id drawn at planning, its secret values
    kept, and its first event written (which puts it in the index)."""
    submission = planned.submission
    submission.save()
    # read back by whatever hands them on (the kind's start)
    secrets.keep(submission.job_id, "env", planned.env_values)
    secrets.keep(submission.job_id, "notify", planned.header_values)
    plan, job_file = planned.plan, request.job_file
    index.journal(submission.job_id, role="submit", run_dir=str(submission.run_dir)).submitted(
        name=submission.job.name, cluster=planned.job.profile_ref.name,
        kind=submission.profile.kind, spec_json=spec_json(plan), run_dir=str(submission.run_dir),
        job_file=str(job_file.resolve()), spec_hash=spec_hash(plan),
        idempotency_key=request.idempotency_key, origin=_origin(request, planned))
    if planned.fit_estimate is not None:
        index.journal(submission.job_id, role="submit",
                      run_dir=str(submission.run_dir)).fit_estimated(*planned.fit_estimate)
    return submission


def _act_on_checkpoint(index: JobIndex, submission: Submission, planned: PlannedSubmission,
                       found: Existing, choice: Choice, say: Say | None) -> None:
    """``--fresh`` moves the checkpoints aside, and deletes the earlier runs moved aside beyond
    checkpoint.keep_previous; what was done is recorded and said."""
    job_id, checkpoint_dir = submission.job_id, planned.plan.checkpoint_dir
    moved_to = (start_fresh(checkpoint_dir, job_id, _file_layout(planned))
                if choice == "fresh" else None)
    lines = [(f"submit_{choice}", said(found, choice, moved_to))]
    if moved_to is not None:
        keep = planned.submission.job.checkpoint.keep_previous
        created = {job.id: job.created_at for job in index.store.jobs()}
        deleted = prune_previous(moved_to, created, keep, job_id)
        if deleted:
            lines.append(("previous_pruned", pruned_said(deleted, keep)))
    journal = index.journal(job_id, role="submit", run_dir=str(submission.run_dir))
    for kind, line in lines:
        journal.add_event(attempt=None, kind=kind, message=line)
        if say is not None:
            say(line)


def record_submission(index: JobIndex, request: SubmitRequest,
                      planned: PlannedSubmission | None = None, say: Say | None = None,
                      ) -> tuple[str, bool, Submission | None]:
    """Freeze the submission in its run folder and record it as the job's first event. Returns
    (job id, created, submission); nothing is started. ``planned``: the request as planned before
    the index was opened (None: planned here). ``say`` hears which checkpoint already in the job's
    checkpoint folder is resumed or moved aside (control/resubmit)."""
    job_id, created, recorded = _record_planned(index, request, planned, say)
    return job_id, created, recorded.submission if recorded is not None else None


def _record_planned(index: JobIndex, request: SubmitRequest, planned: PlannedSubmission | None,
                    say: Say | None) -> tuple[str, bool, PlannedSubmission | None]:
    """``record_submission``, giving the planned submission recorded (its plan is what starts)."""
    import shutil

    init = resolve_init_from(index, request.init_from) if request.init_from is not None else None
    if planned is None:
        planned = plan_submission(request, init)
    elif init is not None:
        planned = warm_started(request, planned, init)
    key = request.idempotency_key
    if key:
        existing = index.store.job_for_key(key)
        if existing is not None:
            return existing, False, None
    found, choice = _checkpoint_there(index, request, planned)
    submission = _record(index, request, planned)
    job_id = submission.job_id
    if index.store.job(job_id) is None:  # another submit with the same key got there first
        shutil.rmtree(submission.run_dir, ignore_errors=True)
        secrets.forget(job_id)
        return str(index.store.job_for_key(key or "")), False, None
    if found is not None and choice is not None:
        _act_on_checkpoint(index, submission, planned, found, choice, say)
    elif request.checkpoint_choice == "fresh":
        kept = planned.submission.job.checkpoint
        line = nothing_to_move(planned.plan.checkpoint_dir, bool(kept.dir or kept.file))
        index.journal(job_id, role="submit", run_dir=str(submission.run_dir)).add_event(
            attempt=None, kind="submit_fresh", message=line)
        if say is not None:
            say(line)
    return job_id, True, planned


def submit(index: JobIndex, request: SubmitRequest, planned: PlannedSubmission | None = None,
           say: Say | None = None) -> tuple[str, bool]:
    """Record the job and hand it to its cluster kind, with the plan recorded: the kind starts
    exactly it. Returns (job id, created)."""
    job_id, created, recorded = _record_planned(index, request, planned, say)
    if recorded is None:
        return job_id, created
    submission = recorded.submission
    try:
        try:
            cluster_kind(submission.profile.kind).start(index, submission, recorded.job.first)
        except InputError as exc:
            raise in_profile(exc, submission.cluster) from None
    except BaseException as exc:
        index.journal(job_id).set_state(JobState.FAILED, reason=f"could not start: {exc}")
        secrets.forget(job_id, "env")  # no supervisor will need them (the notifier may still)
        raise
    finally:
        start_notifier(submission)  # a job that could not start is notified of too
    return job_id, True


def in_profile(exc: InputError, cluster: str) -> InputError:
    """A kind's refusal at start that names a field of the cluster's profile, with that profile's
    file, as a refusal at planning says it."""
    if exc.file is not None or exc.field is None:
        return exc
    from fsdp_orch.jobspec.profiles import find_profile

    try:
        path = str(find_profile(cluster).path)
    except Exception:  # noqa: BLE001 - the profile moved since the planning: said without it
        return exc
    return InputError(exc.detail, file=path, field=exc.field, line=exc.line)


def cancel(index: JobIndex, job_id: str) -> str:
    from fsdp_orch.record.run_roots import run_folder_problem

    row = index.store.job(job_id)
    if row is None:
        raise JobNotFound(job_id)
    problem = run_folder_problem(row.run_dir)
    if problem:
        raise InputError(f"not cancelled: {problem} (fsdp-orch acts only on run folders of your "
                         f"own; see 'fsdp-orch doctor')")
    said = cluster_kind(row.kind).cancel(index, row)
    # the notifier, which may still have the end to send, forgets its own
    secrets.forget(row.id, "env")
    return said
