"""Which checkpoint an attempt resumes from, after moving aside (never deleting) what a script would
wrongly resume or overwrite. Effects only through the injected ``Storage`` and ``sleep``."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from fsdp_orch.checkpoints.aside import move_aside
from fsdp_orch.checkpoints.folders import (
    latest_complete,
    list_checkpoints,
    partial_newer_than_latest,
)
from fsdp_orch.checkpoints.info import DCP, CheckpointInfo, latest_of
from fsdp_orch.checkpoints.single_file import (
    FileLayout,
    describe_file,
    file_sizes,
    list_files,
    looked_twice,
    stray_files,
    suggested_setting,
)
from fsdp_orch.checkpoints.storage import Storage

MOVED_ASIDE = "checkpoint_moved_aside"
UNREADABLE = "checkpoint_unreadable"  # kept aside: a checkpoint to the script, none of our layouts
FROM_SCRATCH = "restart_from_scratch"


@dataclass(frozen=True)
class CheckpointSetting:
    """The job's checkpoint settings, resolved: ``folder`` (checkpoint.dir, or checkpoint.file's
    folder), ``layout`` (checkpoint.file), ``workdir`` and whether the user asked for resuming
    (resume_args or a checkpoint.dir/file): then files no layout reads are kept from a restart."""

    folder: str
    layout: FileLayout | None = None
    workdir: str = "."
    guarded: bool = False


@dataclass
class ResumePoint:
    info: CheckpointInfo | None
    events: list[tuple[str, str]] = field(default_factory=list)  # (kind, message) to record


def latest(setting: CheckpointSetting, storage: Storage,
           first_look: dict[str, int] | None = None) -> CheckpointInfo | None:
    """The latest complete checkpoint. A file of ``checkpoint.file`` counts when its size is the one
    of ``first_look`` (the previous look); without it, one size is taken as both looks."""
    if setting.layout is None:
        return latest_complete(setting.folder, storage)
    look = file_sizes(setting.layout, storage) if first_look is None else first_look
    return latest_of(list_files(setting.layout, storage, look))


def resume_point(setting: CheckpointSetting, storage: Storage, attempt: int, *, resume: bool,
                 sleep: Callable[[float], None]) -> ResumePoint:
    """Move aside the partial checkpoints newer than the latest complete one (a script's own
    "latest" would take them), and on a restart the checkpoint-like files no layout reads (the
    script would start over and overwrite them); then the latest complete checkpoint, unless
    ``resume`` is False (attempt 0 with ``checkpoint.resume`` other than auto)."""
    tag = f"attempt-{attempt}"
    events: list[tuple[str, str]] = []
    if setting.layout is not None:
        found = looked_twice(setting.layout, storage, sleep)
        newest = latest_of(found)
        partial = [c for c in found if not c.complete and (
            newest is None or not newest.step_known or not c.step_known or c.step > newest.step)]
    else:
        # The runtime's own step-N folders are left to it: it skips and prunes partial ones.
        partial = [c for c in partial_newer_than_latest(setting.folder, storage) if c.layout != DCP]
        newest = None
    for src, dst in move_aside(partial, setting.folder, tag, storage):
        why = next((c.reason for c in partial if c.path == src), "")
        events.append((MOVED_ASIDE, f"{src} is incomplete ({why}) and newer than the latest complete "
                                    f"checkpoint: moved to {dst}"))
    if setting.layout is None:
        newest = latest_complete(setting.folder, storage)
        if attempt > 0 and newest is None and setting.guarded:
            events += _keep_strays(setting, storage, tag)
        elif attempt > 0 and newest is None and (strays := _strays(setting, storage)):
            events.append((FROM_SCRATCH, f"attempt {attempt} starts from scratch, with {', '.join(strays)} "
                                         "left in place (no checkpoint.dir, file or resume_args says they "
                                         "are the job's checkpoints): a script that saves there overwrites them"))
            return ResumePoint(None, events)
    if attempt > 0 and newest is None and events:
        events.append((FROM_SCRATCH, f"attempt {attempt} starts from scratch: no complete checkpoint "
                                     f"in {setting.layout.pattern if setting.layout else setting.folder}"
                                     " (what was there is moved aside and kept, above)"))
    return ResumePoint(newest if resume else None, events)


def _keep_strays(setting: CheckpointSetting, storage: Storage, tag: str) -> list[tuple[str, str]]:
    """Files in checkpoint.dir that look like a script's checkpoint (``out/ckpt.pt``) but are none
    of the folder layouts: moved aside before a restart from scratch would overwrite them."""
    events = []
    for path in _strays(setting, storage):
        info = describe_file(path, FileLayout(path), storage, storage.size(path))
        [(src, dst)] = move_aside([info], setting.folder, tag, storage)
        rel = suggested_setting(str(src), setting.workdir)
        if info.complete:
            what = ("a whole torch.save/pickle file that no checkpoint.dir layout reads; "
                    f"set checkpoint.file: {rel} (and checkpoint.step_key, e.g. iter_num) to resume from it")
        else:
            what = (f"not a checkpoint fsdp-orch can read ({info.reason}); checkpoint.file: {rel} "
                    "would name it as a single-file checkpoint")
        events.append((UNREADABLE, f"{src} is {what}. The restart finds no complete checkpoint and would "
                                   f"start over and overwrite it: moved to {dst} and kept"))
    return events


def _strays(setting: CheckpointSetting, storage: Storage) -> list[str]:
    known = {str(c.path) for c in list_checkpoints(setting.folder, storage)}
    return stray_files(setting.folder, storage, known)


def setting_of(checkpoint_dir: str, checkpoint_file: str | None, step_key: str | None, workdir: str,
               guarded: bool) -> CheckpointSetting:
    expand = os.path.expanduser
    layout = FileLayout(expand(checkpoint_file), step_key) if checkpoint_file else None
    return CheckpointSetting(expand(checkpoint_dir), layout, expand(workdir), guarded)


__all__ = ["CheckpointSetting", "FROM_SCRATCH", "MOVED_ASIDE", "ResumePoint", "UNREADABLE", "latest",
           "resume_point", "setting_of"]
