"""From a job file and a cluster name to a recorded, started job (doing); the planning is
control/planning's."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from fsdp_orch.backends.registry import cluster_kind
from fsdp_orch.control.planning import plan_job
from fsdp_orch.control.resubmit import Choice, decide, existing_checkpoint, said, start_fresh
from fsdp_orch.control.warm_start import resolve_init_from
from fsdp_orch.jobspec.secrets import resolve_submission
from fsdp_orch.launch.plan import LaunchPlan, spec_json
from fsdp_orch.launch.submission import Submission
from fsdp_orch.notify.process import start_notifier
from fsdp_orch.observe.checkpoint_files import FileLayout
from fsdp_orch.places import secrets
from fsdp_orch.record.index import JobIndex
from fsdp_orch.vocab.errors import InputError, JobNotFound
from fsdp_orch.vocab.states import JobState


def check_submission(job_file: Path, cluster: str, *, overrides: list[str] | None = None,
                     accelerate_config: str | None = None) -> None:
    """What ``submit`` checks of the job, its profile and its references, done before anything is
    opened or written: bad input exits 2 having written nothing (not even the index)."""
    planned = plan_job(job_file, cluster, overrides=overrides, accelerate_config=accelerate_config)
    resolve_submission(planned.submission.profile, planned.submission.job, os.environ, str(job_file),
                       str(planned.profile_ref.path))


def spec_hash(plan: LaunchPlan) -> str:
    return hashlib.sha256(spec_json(plan).encode()).hexdigest()[:16]


def record_submission(index: JobIndex, job_file: Path, cluster: str, *, overrides: list[str] | None = None,
                      accelerate_config: str | None = None, idempotency_key: str | None = None,
                      home_dir: Path | None = None, origin: dict | None = None,
                      init_from: str | None = None, init_optimizer: bool = False,
                      checkpoint_choice: Choice | None = None, say: Callable[[str], None] | None = None,
                      ) -> tuple[str, bool, Submission | None]:
    """Validate and plan, freeze the submission in its run folder and record it as the job's first
    event (which puts it in the index). Returns (job id, created, submission); nothing is started.
    ``checkpoint_choice``: what to do with a complete checkpoint already in the job's checkpoint
    folder (control/resubmit); ``say`` hears which one is resumed or moved aside."""
    import dataclasses
    import shutil

    init = resolve_init_from(index, init_from) if init_from is not None else None
    origin = dict(origin or {})
    if init is not None:
        origin.update(init_from=init.path, init_step=init.step, **({"init_job": init.job_id} if init.job_id else {}))
    planned = plan_job(job_file, cluster, overrides=overrides, accelerate_config=accelerate_config,
                       home_dir=home_dir, init=init, init_optimizer=init_optimizer,
                       checkpoint_per_job="schedule" in origin)
    env_values, header_values = resolve_submission(planned.submission.profile, planned.submission.job, os.environ,
                                                   str(job_file), str(planned.profile_ref.path))
    if idempotency_key:
        existing = index.store.job_for_key(idempotency_key)
        if existing is not None:
            return existing, False, None
    found, choice = None, None
    file_layout = (FileLayout(os.path.expanduser(planned.plan.checkpoint_file), planned.submission.job.checkpoint.step_key)
                   if planned.plan.checkpoint_file else None)
    if not planned.submission.checkpoint_per_job and planned.submission.job.checkpoint.resume == "auto":
        found = existing_checkpoint(planned.plan.checkpoint_dir, index.store.jobs(), file_layout)
        choice = decide(found, checkpoint_choice, field="--resume/--fresh")
    job_id = os.urandom(6).hex()
    submission = dataclasses.replace(planned.submission, job_id=job_id)
    submission.save()
    secrets.keep(job_id, "env", env_values)  # read back by whatever hands them on (the kind's start)
    secrets.keep(job_id, "notify", header_values)
    index.journal(job_id, role="submit", run_dir=str(submission.run_dir)).submitted(
        name=submission.job.name, cluster=planned.profile_ref.name, kind=submission.profile.kind,
        spec_json=spec_json(planned.plan), run_dir=str(submission.run_dir), job_file=str(job_file.resolve()),
        spec_hash=spec_hash(planned.plan), idempotency_key=idempotency_key, origin=origin or None)
    if index.store.job(job_id) is None:  # another submit with the same key got there first
        shutil.rmtree(submission.run_dir, ignore_errors=True)
        secrets.forget(job_id)
        return str(index.store.job_for_key(idempotency_key or "")), False, None
    if found is not None and choice is not None:
        moved_to = start_fresh(planned.plan.checkpoint_dir, job_id, file_layout) if choice == "fresh" else None
        line = said(found, choice, moved_to)
        index.journal(job_id, role="submit", run_dir=str(submission.run_dir)).add_event(
            attempt=None, kind=f"submit_{choice}", message=line)
        if say is not None:
            say(line)
    return job_id, True, submission


def submit(index: JobIndex, job_file: Path, cluster: str, *, overrides: list[str] | None = None,
           accelerate_config: str | None = None, idempotency_key: str | None = None,
           home_dir: Path | None = None, origin: dict | None = None, init_from: str | None = None,
           init_optimizer: bool = False, checkpoint_choice: Choice | None = None,
           say: Callable[[str], None] | None = None) -> tuple[str, bool]:
    """Validate, record the job, hand it to its cluster kind. Returns (job id, created).
    ``init_from``: a job id or checkpoint path the job starts from (a warm start)."""
    job_id, created, submission = record_submission(
        index, job_file, cluster, overrides=overrides, accelerate_config=accelerate_config,
        idempotency_key=idempotency_key, home_dir=home_dir, origin=origin, init_from=init_from,
        init_optimizer=init_optimizer, checkpoint_choice=checkpoint_choice, say=say)
    if submission is None:
        return job_id, created
    try:
        cluster_kind(submission.profile.kind).start(index, submission)
    except BaseException as exc:
        index.journal(job_id).set_state(JobState.FAILED, reason=f"could not start: {exc}")
        secrets.forget(job_id, "env")  # no supervisor will need them (the notifier may still)
        raise
    finally:
        start_notifier(submission)  # a job that could not start is notified of too
    return job_id, True


def cancel(index: JobIndex, job_id: str) -> str:
    from fsdp_orch.record.run_roots import run_folder_problem

    row = index.store.job(job_id)
    if row is None:
        raise JobNotFound(job_id)
    problem = run_folder_problem(row.run_dir)
    if problem:
        raise InputError(f"not cancelled: {problem} (fsdp-orch acts only on run folders of your own; "
                         f"see 'fsdp-orch doctor')")
    said = cluster_kind(row.kind).cancel(index, row)
    secrets.forget(row.id, "env")  # the notifier, which may still have the end to send, forgets its own
    return said
