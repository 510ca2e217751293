"""``submit --init-from JOB_ID|PATH``: which checkpoint a warm start begins from. Resolved once, at
submit, before anything is written; torch-free (it reads the commit records)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fsdp_orch.checkpoints.folders import checkpoint_info, latest_complete
from fsdp_orch.record.index import JobIndex
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.inputs import init_from as checked_init_from

FIELD = "--init-from"


@dataclass(frozen=True)
class InitSource:
    path: str  # a complete checkpoint: step-N (DCP), checkpoint-N (HF) ...
    step: int
    layout: str
    job_id: str | None  # the job it came from, when given by id


def _from_job(index: JobIndex, job_id: str) -> InitSource:
    from fsdp_orch.backends.registry import cluster_kind
    from fsdp_orch.launch.submission import Submission

    row = index.store.job(job_id)
    assert row is not None  # the caller found its id
    run_dir = Path(row.run_dir)
    try:
        submission = Submission.load(run_dir, cluster_kind(row.kind))
    except (OSError, ValueError) as exc:
        raise InputError(f"job {job_id}'s submission cannot be read ({exc})", field=FIELD) from None
    directory = submission.checkpoint_dir
    found = latest_complete(directory)
    if found is None:
        raise InputError(f"job {job_id} has no complete checkpoint in {directory}; "
                         "expected a job that saved at least one", field=FIELD)
    return InitSource(str(found.path), found.step, found.layout, job_id)


def _from_path(text: str) -> InitSource:
    path = Path(text).expanduser().resolve()
    if not path.exists():
        raise InputError(f"no job and no path named {text!r}; expected a job id (fsdp-orch status) "
                         "or a checkpoint (step-N, checkpoint-N) or a folder of them", field=FIELD)
    info = checkpoint_info(path)
    if info is not None:
        if not info.complete:
            raise InputError(f"{path} is not a complete checkpoint "
                             f"({info.reason or 'incomplete'}); "
                             "expected one with its commit record", field=FIELD)
        return InitSource(str(info.path), info.step, info.layout, None)
    found = latest_complete(path)
    if found is None:
        raise InputError(f"{path} holds no complete checkpoint; expected step-N or checkpoint-N "
                         "folders", field=FIELD)
    return InitSource(str(found.path), found.step, found.layout, None)


def resolve_init_from(index: JobIndex, text: str) -> InitSource:
    """A job id (or its unique prefix): that job's latest complete checkpoint. A path: that
    checkpoint, or the latest complete one in that folder. InputError
    otherwise (an empty text too)."""
    text = checked_init_from(text, FIELD)
    if "/" in text or text.startswith("."):
        return _from_path(text)
    job_id = index.store.find_job_id(text)
    if job_id is None:
        index.ingest()
        job_id = index.store.find_job_id(text)
    if job_id is not None:
        index.ingest([job_id])
        return _from_job(index, job_id)
    return _from_path(text)


__all__ = ["InitSource", "resolve_init_from"]
