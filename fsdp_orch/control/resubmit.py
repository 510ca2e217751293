"""A new submission whose checkpoint folder already holds a complete checkpoint: it would resume it.
``submit`` says which checkpoint and which job wrote it, and refuses to silently continue a job that
ended SUCCEEDED (its training is done: a second run would train 0 steps and report success) unless
told ``--resume`` (continue it) or ``--fresh`` (move it aside, keep it, and start over)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from fsdp_orch.checkpoints.aside import PREVIOUS_DIR
from fsdp_orch.checkpoints.single_file import FileLayout
from fsdp_orch.checkpoints.source import source_of
from fsdp_orch.checkpoints.storage import LOCAL
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.states import JobState

Choice = Literal["resume", "fresh"]
# a writer whose training reached its end: resuming it would train nothing, or past the end
FINISHED = (JobState.SUCCEEDED, JobState.INCOMPLETE)


@dataclass(frozen=True)
class Existing:
    """The checkpoint a new submission would resume, and the job of ours that wrote it (None: a
    checkpoint from outside fsdp-orch's jobs, or from a job no longer in the index)."""

    path: str
    step: int | None
    writer: JobStatus | None


def checkpoint_dir_of(job: JobStatus) -> str | None:
    import json

    try:
        return str(json.loads(job.spec_json)["_resolved"]["checkpoint_dir"])
    except (ValueError, KeyError, TypeError):
        return None


def writer_of(checkpoint_dir: str, jobs: Iterable[JobStatus], step: int | None = None,
              path: str | None = None) -> JobStatus | None:
    """The newest job that wrote into ``checkpoint_dir``: of those with a checkpoint recorded,
    else of all that used it (pure). Given the checkpoint found (its ``step`` or ``path``), only a
    job whose events recorded that very checkpoint: a copy planted under a job's folder name is
    no job's (the claim "written by job ..." must be true)."""
    same = [job for job in jobs if checkpoint_dir_of(job) == checkpoint_dir]
    if step is not None or path is not None:
        pool = [job for job in same if (path is not None and job.last_checkpoint_path == path)
                or (step is not None and job.last_checkpoint_step == step)]
    else:
        committed = [job for job in same
                     if job.last_checkpoint_step is not None or job.last_checkpoint_path]
        pool = committed or same
    return max(pool, key=lambda job: job.created_at) if pool else None


def existing_checkpoint(checkpoint_dir: str, jobs: Iterable[JobStatus],
                        layout: FileLayout | None = None) -> Existing | None:
    """``layout``: the job's ``checkpoint.file`` (its files,
    not the folder layouts, are its checkpoints)."""
    found = source_of(checkpoint_dir, layout, LOCAL).latest()
    if found is None:
        return None
    step = found.step if found.step_known else None
    return Existing(str(found.path), step,
                    writer_of(checkpoint_dir, jobs, step=step, path=str(found.path)))


def decide(existing: Existing | None, choice: Choice | None, field: str) -> Choice | None:
    """What to do with it (pure): None when there is nothing to decide; InputError when the writer
    ended SUCCEEDED and no choice was given."""
    if existing is None:
        return None
    if choice is None and existing.writer is not None and existing.writer.state in FINISHED:
        writer = existing.writer
        step = "" if existing.step is None else f" (step {existing.step})"
        raise InputError(f"{existing.path}{step} was written by job {writer.id} "
                         f"({writer.name}), which ended {writer.state}: a new submission would "
                         "continue it. Pass --resume to continue it, or --fresh to move "
                         "it aside (kept) and start over", field=field)
    return choice or "resume"


def said(existing: Existing, choice: Choice, moved_to: str | None = None) -> str:
    """The line ``submit`` prints on standard error."""
    by = (f"written by job {existing.writer.id} ({existing.writer.name}, {existing.writer.state})"
          if existing.writer else "not written by a job fsdp-orch knows")
    step = "step unknown" if existing.step is None else f"step {existing.step}"
    if choice == "fresh":
        return (f"starting fresh: moved the checkpoints aside to {moved_to} (kept); "
                f"the newest was {existing.path} ({step}, {by})")
    return f"resuming from {existing.path} ({step}, {by})"


def nothing_to_move(checkpoint_dir: str, configured: bool) -> str:
    """What ``--fresh`` says when it found no complete checkpoint to move (pure): where it looked,
    and that a script resuming on its own from files there or elsewhere is not reset."""
    where = ("the job's checkpoint.dir" if configured
             else "the default checkpoint folder: the job has no checkpoint.dir or checkpoint.file")
    return (f"--fresh found no checkpoint to move: looked in {checkpoint_dir} ({where}); "
            "nothing was moved, and a script that resumes on its own from files fsdp-orch "
            "does not know (its own save folder) is not reset")


def start_fresh(checkpoint_dir: str, job_id: str, layout: FileLayout | None = None) -> str:
    """Move every checkpoint in ``checkpoint_dir`` (every file of ``layout``, where given) to
    ``<dir>/.fsdp-orch-previous/<name>.<job id>``; the folder they went to. Nothing is deleted or
    overwritten."""
    source = source_of(checkpoint_dir, layout, LOCAL)
    source.move_aside(source.checkpoints(), job_id, into=PREVIOUS_DIR)
    return os.path.join(os.path.expanduser(checkpoint_dir), PREVIOUS_DIR)


# The runs moved aside that a checkpoint folder keeps (checkpoint.keep_previous, 1 by default).
# Each costs what the job's own checkpoints cost (keep_last of them: a 7B model's with its AdamW
# state is about 80 GB a checkpoint, so some 250 GB a run), and --fresh used to keep every one
# (158 MB after six runs of the demo's tiny model). One keeps the run a --fresh just replaced, the
# one a user wants back when the fresh start was a mistake, and bounds the folder at twice what the
# job keeps; more is a choice made knowing its cost.
# What move_aside names an entry: ``<name>.<job id>`` (``-N`` when taken), the job id the 12 hex
# digits of the submission that moved it.
_MOVED_BY = re.compile(r"\.(?P<job>[0-9a-f]{12})(?:-\d+)?$")


def to_prune(names: Iterable[str], created: Mapping[str, float], keep: int,
             just_moved: str) -> list[str]:
    """The names in a ``.fsdp-orch-previous`` folder to delete (pure): the entries of the runs
    beyond the ``keep`` newest, a run being the entries one submission moved (named
    ``<name>.<its job id>``), newest by that job's ``created`` time. The run ``just_moved`` (this
    submission's job id) is always kept, and a name that is not ``<name>.<id of a job in
    created>`` is never touched: fsdp-orch did not put it there, or no longer knows the job."""
    runs: dict[str, list[str]] = {}
    for name in sorted(names):
        found = _MOVED_BY.search(name)
        if found is not None and found["job"] in created:
            runs.setdefault(found["job"], []).append(name)
    newest = sorted(runs, key=lambda job: (job == just_moved, created[job]), reverse=True)
    return [name for job in newest[max(1, keep):] for name in runs[job]]


def prune_previous(folder: str, created: Mapping[str, float], keep: int,
                   just_moved: str) -> list[str]:
    """Delete what :func:`to_prune` names in ``folder`` (a ``.fsdp-orch-previous``): folders and
    files, never a symbolic link (nor what it points to); the paths deleted."""
    import shutil
    import stat

    try:
        names = os.listdir(folder)
    except OSError:
        return []
    deleted = []
    for name in to_prune(names, created, keep, just_moved):
        path = os.path.join(folder, name)
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                shutil.rmtree(path)
            elif stat.S_ISREG(mode):
                os.unlink(path)
            else:
                continue
        except OSError:
            continue  # left for the next --fresh
        deleted.append(path)
    return deleted


def pruned_said(deleted: list[str], keep: int) -> str:
    """The line ``submit`` prints (and the event says) for the earlier runs deleted (pure)."""
    runs = "run" if keep == 1 else "runs"
    return (f"deleted {len(deleted)} checkpoint(s) of earlier --fresh runs beyond the newest "
            f"{keep} {runs} kept (checkpoint.keep_previous={keep}): {', '.join(deleted)}")


__all__ = ["FINISHED", "Choice", "Existing", "checkpoint_dir_of", "decide", "existing_checkpoint",
           "nothing_to_move", "prune_previous", "pruned_said", "said", "start_fresh", "to_prune",
           "writer_of"]
