"""Which checkpoint an attempt resumes from, after moving aside (never deleting) what a script would
wrongly resume or overwrite. Effects only through the injected ``Storage`` and ``sleep``."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from fsdp_orch.checkpoints.aside import SUSPECT_DIR
from fsdp_orch.checkpoints.info import DCP, CheckpointInfo
from fsdp_orch.checkpoints.single_file import FileLayout, describe_file, suggested_setting
from fsdp_orch.checkpoints.source import CheckpointSource, Moved, source_of
from fsdp_orch.checkpoints.storage import Storage

MOVED_ASIDE = "checkpoint_moved_aside"
UNREADABLE = "checkpoint_unreadable"  # kept aside: a checkpoint to the script, none of our layouts
FROM_SCRATCH = "restart_from_scratch"
SUSPECT = "checkpoint_suspect"  # a complete checkpoint a resume went wrong from, kept aside
Events = list[tuple[str, str]]  # (kind, message) to record


@dataclass(frozen=True)
class CheckpointSetting:
    """The job's checkpoint settings, resolved: ``folder`` (checkpoint.dir, or checkpoint.file's
    folder), ``layout`` (checkpoint.file), ``workdir`` and whether the user asked for resuming
    (resume_args or a checkpoint.dir/file): then files no layout reads are kept from a restart."""

    folder: str
    layout: FileLayout | None = None
    workdir: str = "."
    guarded: bool = False

    def source(self, storage: Storage) -> CheckpointSource:
        return source_of(self.folder, self.layout, storage)


@dataclass
class ResumePoint:
    info: CheckpointInfo | None
    events: Events = field(default_factory=list)


def resume_point(setting: CheckpointSetting, storage: Storage, attempt: int, *, resume: bool,
                 sleep: Callable[[float], None]) -> ResumePoint:
    """Move aside the partial checkpoints newer than the latest complete one (a script's own
    "latest" would take them), and on a restart the checkpoint-like files no layout reads (the
    script would start over and overwrite them); then the latest complete checkpoint, unless
    ``resume`` is False (attempt 0 with ``checkpoint.resume`` other than auto)."""
    source = setting.source(storage)
    tag = f"attempt-{attempt}"
    found = source.settled(sleep)
    # The runtime's own step-N folders are left to it: it skips and prunes partial ones.
    partial = [c for c in source.newer_partial(found) if c.layout != DCP]
    events = _moved_aside(source.move_aside(partial, tag), partial)
    newest = source.resumable(found)
    if attempt > 0 and newest is None and setting.guarded:
        events += _keep_strays(source, setting.workdir, tag)
    elif attempt > 0 and newest is None and (strays := source.strays()):
        events.append((FROM_SCRATCH, (
            f"attempt {attempt} starts from scratch, with {', '.join(strays)} left in place (no "
            "checkpoint.dir, file or resume_args says they are the job's checkpoints): a script "
            "that saves there overwrites them")))
        return ResumePoint(None, events)
    if attempt > 0 and newest is None and events:
        events.append((FROM_SCRATCH, (
            f"attempt {attempt} starts from scratch: no complete checkpoint in {source.where} "
            "(what was there is moved aside and kept, above)")))
    return ResumePoint(newest if resume else None, events)


@dataclass(frozen=True)
class SetAside:
    """What ``set_aside`` moved (from, to), the highest step among it, and the latest complete
    checkpoint left, which the next attempt resumes from (None: it starts from scratch)."""

    moved: list[tuple[str, str]]
    highest: int | None
    next_from: CheckpointInfo | None


def set_aside(source: CheckpointSource, suspect: str, tag: str) -> SetAside:
    """Move the checkpoint at ``suspect`` into ``<folder>/.fsdp-orch-suspect/`` (a dot-folder: no
    script's glob takes it; the name carries ``tag``, made unique, so a later save of the same step
    never overwrites it), with every complete checkpoint of a higher step (saved by the attempt
    that resumed from it, from its weights). Nothing is deleted."""
    found = source.checkpoints()
    mine = [c for c in found if str(c.path) == suspect][:1]
    if mine and mine[0].step_known:
        mine += [c for c in found if c.complete and c.step_known and c.step > mine[0].step]
    moved = source.move_aside(mine, tag, into=SUSPECT_DIR)
    steps = [c.step for c in mine if c.step_known]
    return SetAside([(str(a), str(b)) for a, b in moved], max(steps, default=None),
                    source.latest())


def _moved_aside(moved: Moved, partial: list[CheckpointInfo]) -> Events:
    events = []
    for src, dst in moved:
        why = next((c.reason for c in partial if c.path == src), "")
        events.append((MOVED_ASIDE, f"{src} is incomplete ({why}) and newer than the latest "
                                    f"complete checkpoint: moved to {dst}"))
    return events


def _keep_strays(source: CheckpointSource, workdir: str, tag: str) -> Events:
    """Files in checkpoint.dir that look like a script's checkpoint (``out/ckpt.pt``) but are none
    of the folder layouts: moved aside before a restart from scratch would overwrite them."""
    events = []
    storage = source.storage
    for path in source.strays():
        info = describe_file(path, FileLayout(path), storage, storage.size(path))
        [(src, dst)] = source.move_aside([info], tag)
        rel = suggested_setting(str(src), workdir)
        if info.complete:
            what = ("a whole torch.save/pickle file that no checkpoint.dir layout reads; "
                    f"set checkpoint.file: {rel} (and checkpoint.step_key, e.g. iter_num) to "
                    "resume from it")
        else:
            what = (f"not a checkpoint fsdp-orch can read ({info.reason}); checkpoint.file: {rel} "
                    "would name it as a single-file checkpoint")
        events.append((UNREADABLE, (
            f"{src} is {what}. The restart finds no complete checkpoint and would start over and "
            f"overwrite it: moved to {dst} and kept")))
    return events


def setting_of(checkpoint_dir: str, checkpoint_file: str | None, step_key: str | None,
               workdir: str, guarded: bool) -> CheckpointSetting:
    """The job's settings resolved, with ``~`` expanded."""
    expand = os.path.expanduser
    layout = FileLayout(expand(checkpoint_file), step_key) if checkpoint_file else None
    return CheckpointSetting(expand(checkpoint_dir), layout, expand(workdir), guarded)


__all__ = ["CheckpointSetting", "FROM_SCRATCH", "MOVED_ASIDE", "SUSPECT", "ResumePoint",
           "SetAside", "UNREADABLE", "resume_point", "set_aside", "setting_of"]
