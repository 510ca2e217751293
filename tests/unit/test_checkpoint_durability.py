"""A checkpoint's ``COMMITTED`` is durable only after what it names: which files and folders the
writers fsync, in which order (real DCP saves in one process, ``os.fsync`` recorded by path); the
crash injected inside a save comes after the shards and before ``.metadata``; and where
``async_save: auto`` saves synchronously."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from fsdp_orch.checkpoints.folders import list_checkpoints
from fsdp_orch.runtime import ckpt_files as files
from fsdp_orch.runtime.dcp_writing import (
    ASYNC_MIN_BYTES,
    CrashingWriter,
    DurableWriter,
    SyncBecause,
    async_choice,
)


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every path fsynced, in order (the fsync is still done)."""
    seen: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    yield seen


def save(path: Path, writer: DurableWriter) -> None:
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"w": torch.arange(6.0)}, storage_writer=writer)


def test_the_durable_writer_fsyncs_the_shards_the_rank_state_and_the_step_folder(
        tmp_path: Path, fsynced: list[str]) -> None:
    step = tmp_path / "step-00000004"
    step.mkdir()
    files.write_rank_state(step, 0, 4, 1, torch.device("cpu"), {})  # written without an fsync
    assert fsynced == []
    save(step, DurableWriter(step, 0))
    assert fsynced == [str(step / "__0_0.distcp"),  # DCP's own (sync_files)
                       str(step / "rank-0.state.pt"), str(step),  # this rank's, once written
                       str(step / ".metadata.tmp"),  # DCP's own, before its rename...
                       str(step)]  # ...which the folder's fsync makes durable


def test_the_commit_record_is_fsynced_then_its_folder_then_the_checkpoint_folder(
        tmp_path: Path, fsynced: list[str]) -> None:
    step = tmp_path / "step-00000004"
    step.mkdir()
    files.write_commit(step, 4, 2, 0, True)
    assert len(fsynced) == 3
    record, folder, parent = fsynced
    assert Path(record).parent == step and Path(record).name.startswith(".COMMITTED.")  # pre-rename
    assert (folder, parent) == (str(step), str(tmp_path))
    assert (step / "COMMITTED").exists()


def test_a_folder_that_cannot_be_fsynced_is_taken_at_its_word(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def refuses(fd: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "fsync", refuses)
    files.fsync_path(tmp_path)  # a network filesystem's folder: no error
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "I/O")))
    with pytest.raises(OSError):
        files.fsync_path(tmp_path)  # a real I/O error is not hidden


class Crash(Exception):
    pass


class Faults:
    """What the crashing writer needs of a FaultInjector: the crash (raised here, not os._exit)."""

    def __init__(self) -> None:
        self.written: list[str] | None = None

    def crash_in_checkpoint(self, step: int, written: list[str]) -> None:
        self.written = written
        raise Crash(step)


def test_the_injected_crash_comes_after_the_shards_and_before_metadata(tmp_path: Path) -> None:
    step = tmp_path / "step-00000006"
    step.mkdir()
    faults = Faults()
    with pytest.raises(CheckpointException, match="Crash: 6"):  # DCP carries the rank's error
        save(step, CrashingWriter(step, 0, faults, 6))  # type: ignore[arg-type]
    assert faults.written == ["__0_0.distcp"]
    assert sorted(p.name for p in step.iterdir()) == ["__0_0.distcp"]
    assert [(c.step, c.complete) for c in list_checkpoints(tmp_path)] == [(6, False)]


GIB = 2**30


@pytest.mark.parametrize(("nbytes", "local", "free", "why"), [
    (ASYNC_MIN_BYTES - 1, 8, None, SyncBecause.SMALL),  # a toy model: a sync save costs little
    (ASYNC_MIN_BYTES, 8, None, SyncBecause.ASYNC),  # free memory unknown: as DCP assumes
    (2 * GIB, 8, 64 * GIB, SyncBecause.ASYNC),  # 16 GiB of copies in 64 GiB free
    (5 * GIB, 8, 64 * GIB, SyncBecause.MEMORY),  # 40 GiB: more than half
])
def test_async_save_auto_saves_in_the_background_where_it_pays_and_fits(
        nbytes: int, local: int, free: int | None, why: int) -> None:
    assert async_choice(nbytes, local, free) == why
