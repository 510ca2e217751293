"""File-level pieces of a checkpoint: commit record,
per-rank state, pruning. No collectives here.

Durability: a ``COMMITTED`` that outlives a power loss must never name data that did not. DCP's
``FileSystemWriter`` (``sync_files=True``, its default) fsyncs each shard file and ``.metadata``'s
temporary file, but no folder: the names of the shards, of ``.metadata`` (a rename) and of the step
folder itself could still be lost. So each rank fsyncs its own per-rank state file and the step
folder once its shards are written (``dcp_writing.DurableWriter``), rank 0 fsyncs the folder again
after ``.metadata``'s rename, and :func:`write_commit` fsyncs the record, then the step folder (the
record's rename) and the checkpoint folder above it (the step folder's name).
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import time
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fsdp_orch.checkpoints.folders import list_checkpoints
from fsdp_orch.checkpoints.layouts.dcp import COMMIT_FILE, METADATA_FILE, parse_commit
from fsdp_orch.places.private import OTHERS_WRITE, write_atomically
from fsdp_orch.places.trust import read_trusted
from fsdp_orch.runtime.ckpt_errors import IO_ERRORS

RANK_STATE = "rank-{rank}.state.pt"


def atomic_write(path: Path, data: bytes, fsync: bool = True) -> None:
    """Written whole or not at all, fsynced unless told (``places.private.write_atomically``), with
    the umask's mode: a checkpoint's files are the user's, shared as they share their folder."""
    write_atomically(path, data, fsync=fsync)


def fsync_path(path: Path) -> None:
    """Make ``path`` (a file, or a folder: the names in it) durable. A filesystem that cannot
    fsync a folder (EINVAL, ENOTSUP: some network filesystems, which write names through at once)
    is taken at its word."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_commit(path: Path, step: int, world_size: int, attempt: int, async_save: bool) -> None:
    """Rank 0, once every rank's shards and ``.metadata`` are written (and fsynced): the commit
    record, fsynced with the folders that name it."""
    record = {"step": step, "world_size": world_size, "time": time.time(), "attempt": attempt,
              "async": async_save}
    close_to_others(path / METADATA_FILE)
    atomic_write(path / COMMIT_FILE, (json.dumps(record) + "\n").encode())
    fsync_path(path)
    fsync_path(path.parent)


def close_to_others(file: Path) -> None:
    """A pickle a resume unpickles is read only when no one else can write it
    (``places.trust.read_trusted``): one written under a group-writable umask (002) is closed."""
    try:
        mode = file.stat().st_mode
        if mode & OTHERS_WRITE:
            file.chmod(mode & ~OTHERS_WRITE & 0o7777)
    except OSError:
        pass


def parse_commit_file(path: Path) -> dict[str, Any] | None:
    try:
        return parse_commit((path / COMMIT_FILE).read_text(encoding="utf-8"))
    except OSError:
        return None


def rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                             "numpy": np.random.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def extras_state(extras: dict[str, Any]) -> dict[str, Any]:
    """Objects with ``state_dict()`` are saved by their state; anything else as it is (pickled)."""
    return {k: (v.state_dict() if hasattr(v, "state_dict") and hasattr(v, "load_state_dict") else v)
            for k, v in extras.items()}


def load_extras(extras: dict[str, Any], saved: dict[str, Any]) -> None:
    for key, value in saved.items():
        current = extras.get(key)
        if current is not None and hasattr(current, "load_state_dict"):
            current.load_state_dict(value)
        else:
            extras[key] = value


def write_rank_state(path: Path, rank: int, step: int, world_size: int, device: torch.device,
                     extras: dict[str, Any]) -> None:
    import io

    buffer = io.BytesIO()
    torch.save({"step": step, "rank": rank, "world_size": world_size, "rng": rng_state(device),
                "extras": extras_state(extras)}, buffer)
    write_atomically(path / RANK_STATE.format(rank=rank), buffer.getvalue(), mode=0o644)


def read_rank_state(path: Path, rank: int) -> dict[str, Any] | None:
    import io

    file = path / RANK_STATE.format(rank=rank)
    if not file.exists():
        return None
    # RNG tuples and numpy arrays need full unpickling: read only if the file is the user's alone,
    # checked on the open file.
    return torch.load(io.BytesIO(read_trusted(file)), map_location="cpu", weights_only=False)


def trusted_reader(path: Path) -> Any:
    """DCP's ``FileSystemReader`` for ``path`` whose ``.metadata`` (a pickle, unpickled in full)
    is read only if the user's alone, checked on the open file (``places.trust.read_trusted``).
    The shards are read by DCP with ``torch.load(weights_only=True)``, which runs no code."""
    import pickle

    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class TrustedReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            metadata = pickle.loads(read_trusted(path / METADATA_FILE))
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return TrustedReader(str(path))


def check_metadata(path: Path) -> str | None:
    """None when DCP's ``.metadata`` reads back, else why not."""
    if not (path / METADATA_FILE).exists():
        return "no .metadata"
    try:
        trusted_reader(path).read_metadata()
    except Exception as exc:  # a truncated or garbled pickle raises anything
        return f"unreadable .metadata ({type(exc).__name__}: {exc})"
    return None


def preflight(directory: Path, path: Path, rank: int, clear: bool, need_bytes: int) -> str | None:
    """Check (and on rank 0 prepare) the step directory before a collective save; None when fine.

    ``clear``: remove ``path`` first (a partial save of the same step by an earlier attempt).
    """
    try:
        if clear:
            directory.mkdir(parents=True, exist_ok=True)
            if path.exists():
                shutil.rmtree(path)
            path.mkdir()
        probe = path / f".probe-rank-{rank}"
        with open(probe, "wb") as f:
            f.write(b"ok")
        probe.unlink()
        free = shutil.disk_usage(path).free
        if need_bytes and free < need_bytes:
            return (f"not enough free space in {path}: about {need_bytes / 2**20:.0f} MiB needed, "
                    f"{free / 2**20:.0f} MiB free")
    except OSError as exc:
        if exc.errno in IO_ERRORS:
            return f"{IO_ERRORS[exc.errno]} in {path}"
        return f"cannot write to {path}: {exc.strerror or exc}"
    return None


# Rank 0 leaves it in a step folder it prepared: a rank that does not see it has a disk of its own.
PREPARED_MARK = ".prepared-by-rank-0"


def mark_prepared(path: Path) -> None:
    (path / PREPARED_MARK).touch()


def is_prepared(path: Path) -> bool:
    return (path / PREPARED_MARK).exists()


def step_dirs(directory: Path) -> list[str]:
    """The names of the step folders in ``directory``."""
    return sorted(c.path.name for c in list_checkpoints(directory) if c.layout == "dcp")


def drop_step_dirs_not_in(directory: Path, kept: Collection[str], protect: Path) -> None:
    """On a host with its own disk: delete the step folders that rank 0 no longer has."""
    for info in list_checkpoints(directory):
        if info.layout == "dcp" and info.path.name not in kept and info.path != protect:
            shutil.rmtree(info.path, ignore_errors=True)


SUPERSEDED = COMMIT_FILE + ".superseded"


def supersede(directory: Path, step: int) -> list[Path]:
    """Make complete checkpoints after ``step`` incomplete (keeping their files): rename
    ``COMMITTED``. Returns the checkpoints changed."""
    done = []
    for info in list_checkpoints(directory):
        if info.layout == "dcp" and info.complete and info.step > step:
            os.replace(info.path / COMMIT_FILE, info.path / SUPERSEDED)
            done.append(info.path)
    return done


def prune(directory: Path, keep_last: int, protect: Collection[Path] = ()) -> list[Path]:
    """Delete complete checkpoints beyond the newest ``keep_last`` and partial ones older than the
    newest complete one. Returns what was deleted."""
    found = [c for c in list_checkpoints(directory) if c.layout == "dcp"]
    complete = [c for c in found if c.complete]
    if not complete:
        return []
    newest = complete[-1].step
    doomed = [c.path for c in complete[:-keep_last]]
    doomed += [c.path for c in found if not c.complete and c.step < newest]
    deleted = []
    for path in doomed:
        if path in protect:
            continue
        try:
            shutil.rmtree(path)
            deleted.append(path)
        except OSError as exc:
            warnings.warn(f"fsdp-orch: could not delete old checkpoint {path}: {exc}", stacklevel=2)
    return deleted


__all__ = ["PREPARED_MARK", "RANK_STATE", "SUPERSEDED", "atomic_write", "check_metadata",
           "drop_step_dirs_not_in", "fsync_path", "is_prepared", "load_extras", "mark_prepared",
           "preflight", "prune", "step_dirs", "read_rank_state", "set_rng_state", "supersede",
           "close_to_others", "trusted_reader", "write_commit", "write_rank_state"]
