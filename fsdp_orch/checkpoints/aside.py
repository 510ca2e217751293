"""Moving checkpoints out of a script's way, never deleting them: into a dot-folder inside the
checkpoint folder, because a sibling like ``checkpoint-30.partial`` still matches HF's rotation
glob ``checkpoint-*``, and no script's glob for ``checkpoint-*``, ``step_*`` or ``*.ckpt`` takes
a dot-folder."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from fsdp_orch.checkpoints.globs import is_pattern
from fsdp_orch.checkpoints.info import CheckpointInfo
from fsdp_orch.checkpoints.storage import LOCAL, Storage

INCOMPLETE_DIR = ".fsdp-orch-incomplete"  # partial checkpoints a restart would wrongly resume
PREVIOUS_DIR = ".fsdp-orch-previous"  # every checkpoint, moved by submit --fresh
# complete checkpoints a resume went wrong from (checkpoints.suspect), and those saved after them
SUSPECT_DIR = ".fsdp-orch-suspect"
OWN_DIRS = ".fsdp-orch-"  # the start of the name of each of these folders


def move_aside(infos: Iterable[CheckpointInfo], directory: str | os.PathLike[str], tag: str,
               storage: Storage = LOCAL, into: str = INCOMPLETE_DIR) -> list[tuple[Path, Path]]:
    """Rename each checkpoint to ``<directory>/<into>/<name>.<tag>`` (``-1``, ``-2``... when
    taken; ``into`` is ``.fsdp-orch-incomplete`` by default); returns (from, to) pairs. Nothing is
    deleted."""
    if not tag or os.sep in tag:
        raise ValueError(f"move_aside: tag must be a plain name, got {tag!r}")
    folder = os.path.expanduser(os.fspath(directory))
    moved = []
    for info in infos:
        # a glob's checkpoints are kept beside where each was found
        target_dir = (info.path.parent if is_pattern(folder) else Path(folder)) / into
        target = target_dir / f"{info.path.name}.{tag}"
        n = 0
        while storage.exists(str(target)):
            n += 1
            target = target_dir / f"{info.path.name}.{tag}-{n}"
        storage.move(str(info.path), str(target))
        moved.append((info.path, target))
    return moved


__all__ = ["INCOMPLETE_DIR", "OWN_DIRS", "PREVIOUS_DIR", "SUSPECT_DIR", "move_aside"]
