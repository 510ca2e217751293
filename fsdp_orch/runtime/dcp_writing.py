"""How a save goes through DCP's writers: the writer that leaves its files durable before the
commit; the async saves' CPU staging buffers, reused from save to save, and whether a node has the
memory for them; the sync save without torch.save's unchecked CRC-32s; and the writer that crashes
a rank on purpose between its shards and the commit (``FSDP_ORCH_FAULT=checkpoint_crash``), in the
training thread (sync) or the background writer (async) alike."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.staging import AsyncStager

from fsdp_orch.bootstrap.faults import FaultInjector
from fsdp_orch.runtime.ckpt_files import RANK_STATE, fsync_path

# ``async_save: auto`` saves in the background only where it is worth a save in flight (a window in
# which a failure loses the newest checkpoint) and safe for the node's memory:
# - from ASYNC_MIN_BYTES a rank: below it a sync save blocks for its fsyncs more than for its bytes
#   (2 CPU ranks here: 0.05-0.16 s at 0.2-4 MiB a rank, 0.19-0.97 s at 16 MiB, against 0.01-0.05 s
#   async), so little is gained;
# - when every local rank's staging copy fits in STAGING_SHARE of the node's free memory (the rest
#   is the data loader's, the page cache's that the writes go through, and the script's).
ASYNC_MIN_BYTES = 16 * 2**20
STAGING_SHARE = 0.5


class DurableWriter(FileSystemWriter):
    """A DCP writer of a step folder whose files are durable before the save can be committed:
    DCP's ``FileSystemWriter`` fsyncs each file it writes; this one also fsyncs this rank's
    per-rank state file and the step folder once its shards are written, and the folder again
    after ``.metadata``'s rename (the coordinator's ``finish``)."""

    def __init__(self, path: Path, rank: int):
        super().__init__(str(path), sync_files=True)
        self.folder = Path(path)
        self.rank = rank

    def write_data(self, plan, planner):
        result = super().write_data(plan, planner)
        result.wait()  # written (and fsynced) by now: FileSystemWriter writes in this call
        own = self.folder / RANK_STATE.format(rank=self.rank)
        if own.exists():
            fsync_path(own)
        fsync_path(self.folder)
        return result

    def finish(self, metadata, results):
        super().finish(metadata, results)
        fsync_path(self.folder)


class CrashingWriter(DurableWriter):
    """Writes this rank's shards, then has ``faults`` crash the rank before the save can be
    committed (``checkpoint_crash``). In an async save this runs in the background writer: the
    rank dies there, with the save in flight."""

    def __init__(self, path: Path, rank: int, faults: FaultInjector, step: int):
        super().__init__(path, rank)
        self.faults = faults
        self.step = step

    def write_data(self, plan, planner):
        result = super().write_data(plan, planner)
        self.faults.crash_in_checkpoint(self.step, [p.name for p in self.folder.iterdir()])
        return result


def free_memory_bytes() -> int | None:
    """What this node (or this process's cgroup, where it is tighter) can still give: Linux's
    MemAvailable, less what the cgroup's limit leaves; None where neither can be read."""
    found: list[int] = []
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as limit_file:
            limit = limit_file.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current", encoding="ascii") as used_file:
                found.append(max(0, int(limit) - int(used_file.read().strip())))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


class SyncBecause:
    """Why ``async_save: auto`` saves synchronously (codes ordered: the ranks agree on the
    highest)."""

    ASYNC = 0
    SMALL = 1
    MEMORY = 2


def async_choice(nbytes: int, local_ranks: int, free: int | None) -> int:
    """``async_save: auto`` for a rank that writes ``nbytes``, beside ``local_ranks`` ranks on its
    node with ``free`` bytes of memory (None: not known, taken as enough, as DCP's own async
    save assumes): a :class:`SyncBecause` code."""
    if nbytes < ASYNC_MIN_BYTES:
        return SyncBecause.SMALL
    if free is not None and nbytes * max(1, local_ranks) > STAGING_SHARE * free:
        return SyncBecause.MEMORY
    return SyncBecause.ASYNC


class CachingStager(AsyncStager):
    """DCP async stager that copies the state into CPU buffers allocated once and reused by every
    later save (pinned on CUDA). Allocating fresh buffers each time costs page faults that, on a
    CPU-only machine, dominate the time training is blocked. The buffers are rebuilt when the
    state's structure changes; they are free for reuse because a save waits for the previous one.
    """

    _synchronize_after_execute = False

    def __init__(self) -> None:
        self.cache: dict[str, Any] | None = None

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        if self.cache is not None:
            try:
                return _copy_state_dict(state_dict, self.cache)
            except Exception:  # noqa: BLE001 - a changed structure: rebuild the buffers below
                self.cache = None
        self.cache = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
        return _copy_state_dict(state_dict, self.cache)

    def synchronize_staging(self) -> None:
        pass

    def close(self) -> None:
        self.cache = None


@contextlib.contextmanager
def no_crc32() -> Iterator[None]:
    """torch.save writes a CRC-32 per record that torch.load never checks (DCP loads through
    torch.load); skipping it makes a sync save about 20% faster. Only around a sync save, while
    the training thread is ours: the switch is process-wide."""
    previous = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(previous)


__all__ = ["ASYNC_MIN_BYTES", "STAGING_SHARE", "CachingStager", "CrashingWriter", "DurableWriter",
           "SyncBecause", "async_choice", "free_memory_bytes", "no_crc32"]
