"""The checkpoints in a checkpoint folder (``checkpoint.dir``, or every folder it matches when it
is a glob), found by the layouts of the registry, oldest first: the latest complete one, and the
partial ones newer than it that a script taking the highest number would wrongly resume."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from fsdp_orch.checkpoints.globs import is_pattern, matching_dirs
from fsdp_orch.checkpoints.info import CheckpointInfo, Step, latest_of
from fsdp_orch.checkpoints.registry import LAYOUTS, Layout, entry_for
from fsdp_orch.checkpoints.storage import LOCAL, Storage

# A checkpoint with where it sorts: by step, then the layout's tiebreak (Lightning's last after
# the numbered files), complete before partial, then by name.
Keyed = tuple[tuple[int, int, bool, str], CheckpointInfo]
Deferred = tuple[Layout, re.Match[str], str]  # a match whose step rule reads its siblings


def _keyed(layout: Layout, match: re.Match[str], path: Path, storage: Storage,
           step: Step) -> Keyed:
    info = layout.describe(match, path, storage, step)
    return (info.step, layout.tiebreak(match), not info.complete, info.path.name), info


def _subfolder_owner(name: str, layouts: Sequence[Layout]) -> Layout | None:
    return next((layout for layout in layouts if layout.subfolder == name), None)


def _by_name(base: str, storage: Storage, layouts: Sequence[Layout],
             only: str | None = None) -> tuple[list[Keyed], list[Deferred]]:
    """The checkpoints in ``base`` (only the one named ``only``, where given) whose step their
    name tells, and the matches whose step rule reads those (judged after them)."""
    found: list[Keyed] = []
    deferred: list[Deferred] = []
    for name in storage.list_dir(base) if only is None else [only]:
        full = os.path.join(base, name)
        hit = entry_for(name, layouts)
        if hit is None:
            owner = _subfolder_owner(name, layouts) if only is None else None
            if owner is not None and storage.is_dir(full):
                found += [k for k in _scan(full, storage, layouts) if k[1].layout == owner.name]
            continue
        layout, match = hit
        if layout.folders_only and not storage.is_dir(full):
            continue
        if (step := layout.step(match, None)) is None:
            deferred.append((layout, match, full))
        else:
            found.append(_keyed(layout, match, Path(full), storage, step))
    return found, deferred


def _scan(base: str, storage: Storage, layouts: Sequence[Layout],
          only: str | None = None) -> list[Keyed]:
    """The checkpoints in ``base`` (only ``only``, where given), sorted; a step rule that reads
    its siblings is given every checkpoint of ``base`` whose name tells its step."""
    found, deferred = _by_name(base, storage, layouts, only)
    if deferred:
        named = found if only is None else _by_name(base, storage, layouts)[0]
        siblings = [info for _, info in named]
        for layout, match, full in deferred:
            step = layout.step(match, siblings) or Step(0)
            found.append(_keyed(layout, match, Path(full), storage, step))
    return sorted(found, key=lambda keyed: keyed[0])


def checkpoint_info(path: str | os.PathLike[str], storage: Storage = LOCAL,
                    layouts: Sequence[Layout] = LAYOUTS) -> CheckpointInfo | None:
    """Describe one checkpoint (folder or Lightning file); None when its name is not one."""
    path = Path(os.path.expanduser(os.fspath(path)))
    hit = entry_for(path.name, layouts)
    if hit is not None and hit[0].judged_alone and (step := hit[0].step(hit[1], None)):
        return hit[0].describe(hit[1], path, storage, step)
    found = _scan(str(path.parent), storage, layouts, only=path.name)
    return found[0][1] if found else None


def list_checkpoints(directory: str | os.PathLike[str], storage: Storage = LOCAL,
                     layouts: Sequence[Layout] = LAYOUTS) -> list[CheckpointInfo]:
    """Every checkpoint in ``directory``, oldest step first (at one step: Lightning's ``last``
    after numbered files, complete before partial). A glob takes every folder it matches, so a
    folder that moves with every run (Lightning's ``version_N``) is followed to the newest step."""
    expanded = os.path.expanduser(os.fspath(directory))
    folders = matching_dirs(expanded, storage) if is_pattern(expanded) else [expanded]
    keyed = [k for folder in folders for k in _scan(folder, storage, layouts)]
    return [info for _, info in sorted(keyed, key=lambda k: k[0])]


def latest_complete(directory: str | os.PathLike[str], storage: Storage = LOCAL,
                    layouts: Sequence[Layout] = LAYOUTS) -> CheckpointInfo | None:
    """The complete checkpoint with the highest step, or None."""
    return latest_of(list_checkpoints(directory, storage, layouts))


def newer_partial(found: Sequence[CheckpointInfo]) -> list[CheckpointInfo]:
    """The partial checkpoints of ``found`` with a step above the latest complete one's (all
    partial ones when none is complete)."""
    complete = [c for c in found if c.complete]
    newest = complete[-1].step if complete else -1
    return [c for c in found if not c.complete and c.step > newest]


def partial_newer_than_latest(directory: str | os.PathLike[str], storage: Storage = LOCAL,
                              layouts: Sequence[Layout] = LAYOUTS) -> list[CheckpointInfo]:
    """The partial checkpoints with a step above the latest complete one's (all partial ones
    when none is complete): what a script that takes the highest number would wrongly resume."""
    return newer_partial(list_checkpoints(directory, storage, layouts))


__all__ = ["checkpoint_info", "latest_complete", "list_checkpoints", "newer_partial",
           "partial_newer_than_latest"]
