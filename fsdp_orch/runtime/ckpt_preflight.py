"""The check every rank takes part in before a collective save: fail fast, on every rank, when
any rank cannot write, before DCP starts a collective that would hang or half-write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.distributed as dist

from fsdp_orch.runtime import ckpt_files as files
from fsdp_orch.runtime.ckpt_errors import CheckpointError
from fsdp_orch.runtime.dist import DistInfo


def preflight_save(directory: Path, path: Path, nbytes: int, info: DistInfo, group: Any) -> None:
    """Raises :class:`CheckpointError` on every rank when any rank cannot write the save of
    ``nbytes`` (this rank's share) into the step folder ``path`` of ``directory``.

    Rank 0 prepares the step folder. A host that does not see it (its own disk: an SSH host
    with ``shared_filesystem: false``) has its first local rank prepare its own, and drop the
    step folders rank 0 has pruned; the supervisor makes a checkpoint whole before a resume."""
    sizes: list[Any] = [None] * info.world_size
    dist.all_gather_object(sizes, nbytes, group=group)
    need = int(sum(sizes) * 1.05)
    first: list[Any] = [None]
    if info.rank == 0:
        error = files.preflight(directory, path, 0, True, need)
        if error is None:
            files.mark_prepared(path)
        first = [(error, files.step_dirs(directory))]
    dist.broadcast_object_list(first, src=0, group=group)
    error, kept = first[0]
    if error:
        raise CheckpointError(f"checkpoint save into {path} refused "
                              f"before writing (rank 0): {error}")
    own_disk = info.rank != 0 and not files.is_prepared(path)
    prepared = None
    if own_disk and info.local_rank == 0:
        prepared = files.preflight(directory, path, info.rank, True, 0)
        files.drop_step_dirs_not_in(directory, kept, protect=path)
    errors: list[Any] = [None] * info.world_size
    # Also: no rank probes its folder before every host prepared its own.
    dist.all_gather_object(errors, prepared, group=group)
    if not any(errors):
        mine = None if info.rank == 0 else files.preflight(directory, path, info.rank, False, 0)
        dist.all_gather_object(errors, mine, group=group)
    failed = [(r, e) for r, e in enumerate(errors) if e]
    if failed:
        rank, error = failed[0]
        raise CheckpointError(f"checkpoint save into {path} refused before writing (rank {rank}): "
                              f"{error}")


__all__ = ["preflight_save"]
