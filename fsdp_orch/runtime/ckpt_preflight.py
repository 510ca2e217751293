"""The checks every rank takes part in before a collective save: fail fast, on every rank, when
any rank cannot write, before DCP starts a collective that would hang or half-write; and, for
``async_save: auto``, whether the saves go in the background."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from fsdp_orch.runtime import ckpt_files as files
from fsdp_orch.runtime.ckpt_errors import CheckpointError
from fsdp_orch.runtime.dcp_writing import SyncBecause, async_choice, free_memory_bytes
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


def agree_on_async(nbytes: int, info: DistInfo, group: Any) -> bool:
    """``async_save: auto``: True when every rank's saves may go in the background
    (:func:`~fsdp_orch.runtime.dcp_writing.async_choice` of each, ``nbytes`` this rank's share);
    the ranks agree on the weightiest reason to save synchronously. Where that is a staging copy
    that would not fit in a node's memory, rank 0 says so (a small state is not worth a line)."""
    free = free_memory_bytes()
    why = torch.tensor([async_choice(nbytes, info.local_world_size, free)], dtype=torch.int32)
    dist.all_reduce(why, op=dist.ReduceOp.MAX, group=group)
    if int(why.item()) == SyncBecause.MEMORY and info.rank == 0:
        here = (f"; {nbytes * info.local_world_size / 2**30:.2f} GiB on this node, "
                f"{free / 2**30:.2f} GiB free" if free is not None else "")
        print(f"[fsdp-orch] checkpoints are saved synchronously (async_save: auto): a CPU copy of "
              f"each rank's state would not fit in half of a node's free memory{here}",
              file=sys.stderr, flush=True)
    return int(why.item()) == SyncBecause.ASYNC


__all__ = ["agree_on_async", "preflight_save"]
