"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP): save, commit, prune, restore.

Layout: ``<checkpoint_dir>/step-<N:08d>/`` holds DCP's shard files (``__<rank>_0.distcp``), DCP's
``.metadata`` (written by rank 0 after every rank's shards are written), one
``rank-<R>.state.pt`` per rank (step, RNG states, extras; written before the shards) and our
commit record ``COMMITTED``. A save goes straight into the final directory; it counts only once
``COMMITTED`` exists, which rank 0 writes atomically after DCP's final gather (sync save: plus a
barrier) or when the async save's future completes. A crash in between leaves a directory without
``COMMITTED``: restore skips it and a later save of the same step starts it afresh.

What is saved of the model and optimizer, and how DCP plans it, is a
:class:`~fsdp_orch.runtime.sharded_state.ShardedState`: FSDP2's unless the caller passes another
(the XLA ones in :mod:`fsdp_orch.runtime.xla_fsdp`); the layout and the commit are the same.

Async saves stage a copy of the state in CPU memory, then write it in a background thread over
a dedicated gloo process group (gloo is not safe to share with the training thread's
collectives); training continues meanwhile. Rank 0 commits from the writer thread as soon as the
write is done. At most one save is in flight: the next save, and :meth:`Checkpointer.finalize`,
wait for it.

The parts: a checkpoint's files (:mod:`~fsdp_orch.runtime.ckpt_files`), DCP's writers
(:mod:`~fsdp_orch.runtime.dcp_writing`), the check before a save
(:mod:`~fsdp_orch.runtime.ckpt_preflight`) and the pieces of a restore
(:mod:`~fsdp_orch.runtime.ckpt_restore`).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from fsdp_orch.bootstrap.faults import FaultInjector
from fsdp_orch.checkpoints.info import CheckpointInfo
from fsdp_orch.checkpoints.layouts.dcp import COMMIT_FILE, step_dir_name
from fsdp_orch.runtime import ckpt_files as files
from fsdp_orch.runtime.ckpt_errors import (
    CheckpointError,
    io_cause,
    kept_clause,
    save_failed,
    warn,
)
from fsdp_orch.runtime.ckpt_preflight import preflight_save
from fsdp_orch.runtime.ckpt_restore import (
    initialise_from,
    readable_paths,
    restore_candidates,
    restore_rank_state,
    saved_step_and_world,
    supersede_after,
)
from fsdp_orch.runtime.dcp_writing import CachingStager, crashing_writer, no_crc32
from fsdp_orch.runtime.dist import DistInfo
from fsdp_orch.runtime.heartbeat import HeartbeatWriter
from fsdp_orch.runtime.sharded_state import Fsdp2State, ShardedState

FULL_MODEL_DIR = "full"


class Checkpointer:
    """Save and restore model + optimizer (+ step, RNG states and ``extras``) of one job."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None, *,
                 directory: Path, info: DistInfo, keep_last: int = 3, interval: int = 100,
                 async_save: bool = False, resume: str = "auto", full_at_end: bool = False,
                 attempt: int = 0, timeout_s: float = 600.0,
                 heartbeat: HeartbeatWriter | None = None, faults: FaultInjector | None = None,
                 extras: dict[str, Any] | None = None, sharded_state: ShardedState | None = None,
                 init_from: Path | None = None, init_optimizer: bool = False):
        from datetime import timedelta

        self.model = model
        self.optimizer = optimizer
        self.sharded_state = sharded_state or Fsdp2State(model, optimizer)
        self.directory = Path(directory).expanduser()
        self.info = info
        self.keep_last = keep_last
        self.interval = interval
        self.async_save = async_save
        self.resume = resume
        self.full_at_end = full_at_end
        self.attempt = attempt
        self.heartbeat = heartbeat
        self.faults = faults
        self.extras: dict[str, Any] = extras if extras is not None else {}
        self.init_from = Path(init_from).expanduser() if init_from else None
        self.init_optimizer = init_optimizer
        self.last_saved_step: int | None = None
        self.committed_step: int | None = None  # the newest save known whole (or the one resumed)
        self.restored_from: Path | None = None
        self.load_seconds: float | None = None  # how long the checkpoint restored from took to load
        # The world size the restored checkpoint was saved with (None: nothing restored). A script
        # whose data is laid out per rank reads it to keep its data order when the world changed.
        self.saved_world_size: int | None = None
        self.block_seconds: list[float] = []  # how long each save held up training...
        self.wait_seconds: list[float] = []  # ...of which waiting for the previous async save
        self._pending: tuple[int, Path, Future, threading.Event] | None = None
        self._stager = CachingStager() if async_save else None
        self._pruner: threading.Thread | None = None
        # One group for every checkpoint collective: DCP's plans, the preflight, the restore choice.
        self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))

    def _beat(self, state: str) -> None:
        if self.heartbeat is not None:
            self.heartbeat.beat(state=state)

    # --- save ----------------------------------------------------------------------------------

    def maybe_save(self, step: int) -> bool:
        """Save when ``step`` is a multiple of the interval; True when a save started."""
        if step > 0 and step % self.interval == 0 and step != self.last_saved_step:
            self.save(step)
            return True
        return False

    def save(self, step: int) -> None:
        """Save the state after ``step`` steps (sync, or started in the background when async)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemWriter
        from torch.distributed.checkpoint.api import CheckpointException

        started = time.perf_counter()
        self._beat("saving")
        path = self.directory / step_dir_name(step)
        try:
            self.wait()
            self.wait_seconds.append(time.perf_counter() - started)
            state = self.sharded_state.for_save()
            preflight_save(self.directory, path, self.sharded_state.nbytes(state), self.info,
                           self.group)
            files.write_rank_state(path, self.info.rank, step, self.info.world_size,
                                   self.info.device, self.extras)
            if self.faults is not None and self.faults.checkpoint_crash_due(step):
                writer = crashing_writer(path, self.faults, step)
            else:
                writer = FileSystemWriter(str(path))
            if self.async_save:
                response = dcp.async_save(state, storage_writer=writer, process_group=self.group,
                                          async_stager=self._stager,
                                          planner=self.sharded_state.save_planner())
                future = response if isinstance(response, Future) else response.upload_completion
                committed = threading.Event()
                if self.info.rank == 0:  # commit as soon as the background write is done
                    future.add_done_callback(functools.partial(
                        self._commit_async, step=step, path=path, done=committed))
                self._pending = (step, path, future, committed)
            else:
                with no_crc32():
                    dcp.save(state, storage_writer=writer, process_group=self.group,
                             planner=self.sharded_state.save_planner())
                dist.barrier(group=self.group)
                self._commit(step, path)
                self.committed_step = step
        except CheckpointError as exc:  # refused before writing, or an injected fault: its text,
            # with what is kept, stands alone (chained, the first would be the evidence read)
            raise CheckpointError(f"{exc}{kept_clause(self._kept())}") from None
        except (Exception, CheckpointException) as exc:  # DCP's own is a BaseException
            self._raise_save_failed(exc, step, path)
        finally:
            self._beat("training")
        self.last_saved_step = step
        self.block_seconds.append(time.perf_counter() - started)

    def _raise_save_failed(self, exc: BaseException, step: int, path: Path) -> None:
        """Raise the save's CheckpointError. One that names its I/O error stands alone: printed
        after DCP's (``CheckpointException ranks:dict_keys([0, 1])``), it would not be the line
        read as the failure's evidence."""
        error = save_failed(exc, step, str(path), self._kept())
        if io_cause(exc) is not None:
            raise error from None
        raise error from exc

    def _kept(self) -> str | None:
        """The last checkpoint this run committed, which a failed save leaves in place."""
        if not self.committed_step:
            return None
        return str(self.directory / step_dir_name(self.committed_step))

    def _commit_async(self, future: Future, step: int, path: Path, done: threading.Event) -> None:
        """Rank 0, in the writer thread once its future completed: DCP's coordinator finished
        only after gathering every rank's write results, so the save is whole."""
        try:
            if future.exception() is None:
                files.write_commit(path, step, self.info.world_size, self.attempt, True)
        except OSError as exc:
            warn(f"could not commit checkpoint {path}: {exc}")
        finally:
            done.set()

    def _commit(self, step: int, path: Path, *, written: bool = False) -> None:
        """Rank 0: write COMMITTED (unless ``written``), then delete old checkpoints in the
        background (removing gigabytes of shards shows in the time a save blocks training)."""
        if self.info.rank != 0:
            return
        if not written:
            files.write_commit(path, step, self.info.world_size, self.attempt, self.async_save)
        self._join_pruner()
        self._pruner = threading.Thread(target=files.prune, name="fsdp-orch-prune", daemon=True,
                                        args=(self.directory, self.keep_last, {path}))
        self._pruner.start()

    def _join_pruner(self) -> None:
        if self._pruner is not None:
            self._pruner.join()
            self._pruner = None

    def wait(self) -> None:
        """Wait for an async save in flight and commit it. Raises CheckpointError if it failed."""
        if self._pending is None:
            return
        step, path, future, committed = self._pending
        self._pending = None
        try:
            future.result()
        except BaseException as exc:  # DCP's CheckpointException is a BaseException
            if not isinstance(exc, Exception) and type(exc).__name__ != "CheckpointException":
                raise
            self._raise_save_failed(exc, step, path)
        if self.info.rank == 0:
            committed.wait()  # the done-callback may still be running
            if not (path / COMMIT_FILE).exists():
                raise CheckpointError(f"async checkpoint save of step {step}: {path} not committed")
        self._commit(step, path, written=True)
        self.committed_step = step

    def finalize(self, step: int | None = None) -> None:
        """End of training: save ``step`` if not saved yet, wait for async saves, write the full
        consolidated model when asked (``save_full_at_end`` / FULL_STATE_DICT)."""
        if step is not None and step > 0 and step != self.last_saved_step:
            self.save(step)
        self.wait()
        self._join_pruner()
        if self.full_at_end and step is not None:
            self.save_full(step)

    def save_full(self, step: int) -> Path:
        """Gather the full model on rank 0 (CPU) and write ``<dir>/full/model.pt`` atomically."""
        import io
        import json

        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        self._beat("saving")
        try:
            state = get_model_state_dict(self.model, options=StateDictOptions(
                full_state_dict=True, cpu_offload=True))
            target = self.directory / FULL_MODEL_DIR
            error: list[str | None] = [None]
            if self.info.rank == 0:
                try:
                    target.mkdir(parents=True, exist_ok=True)
                    buffer = io.BytesIO()
                    torch.save(state, buffer)
                    files.atomic_write(target / "model.pt", buffer.getvalue())
                    files.atomic_write(target / "INFO.json", json.dumps(
                        {"step": step, "format": "torch.save state_dict (full, unsharded)",
                         "time": time.time()}).encode())
                except OSError as exc:
                    error = [f"cannot write {target}: {exc}"]
            dist.broadcast_object_list(error, src=0, group=self.group)
            if error[0]:
                raise CheckpointError(str(error[0]))
        finally:
            self._beat("training")
        return target / "model.pt"

    # --- restore -------------------------------------------------------------------------------

    def candidates(self) -> list[CheckpointInfo]:
        """What restore would try, newest first (rank 0's view; see :meth:`restore`).

        ``auto``: the complete checkpoints of the checkpoint directory. A path (what the
        supervisor passes on a restart): that checkpoint, then the complete ones before it in its
        directory, in case it turns out unreadable. ``never``: none.
        """
        return restore_candidates(self.resume, self.directory)

    def restore(self) -> int:
        """Load the newest usable checkpoint; returns the step to continue from (0: none).

        Rank 0 chooses (skipping checkpoints whose ``.metadata`` does not read back, with a
        warning) and tells the others, so every rank loads the same one. Complete checkpoints
        newer than the one loaded (a corrupt one, or the future of a run rewound with an
        explicit path or ``never``) are superseded: their ``COMMITTED`` is renamed so that
        neither restore nor the supervisor picks them again, and later saves replace them.
        """
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException

        choice: list[Any] = [None]
        if self.info.rank == 0:
            try:
                choice = [readable_paths(self.candidates())]
            except CheckpointError as exc:
                choice = [exc]
        dist.broadcast_object_list(choice, src=0, group=self.group)
        if isinstance(choice[0], Exception):
            raise CheckpointError(str(choice[0]))
        failed = []
        for raw in choice[0]:
            path = Path(raw)
            state = self.sharded_state.for_load()
            started = time.perf_counter()
            try:
                dcp.load(state, checkpoint_id=str(path), process_group=self.group,
                         planner=self.sharded_state.load_planner())
            except (Exception, CheckpointException) as exc:  # DCP's own is a BaseException
                warn(f"skipping checkpoint {path}: load failed ({type(exc).__name__}: {exc})")
                failed.append(str(path))
                continue
            self.sharded_state.apply(state)
            self.load_seconds = time.perf_counter() - started
            step, self.saved_world_size = saved_step_and_world(path)
            restore_rank_state(path, self.info, self.extras, self.saved_world_size)
            self.last_saved_step = self.committed_step = step
            self.restored_from = path
            if self.info.is_main:
                print(f"[fsdp-orch] resumed from {path} (step {step})", file=sys.stderr, flush=True)
            if self.info.rank == 0:
                supersede_after(self.directory, step)
            return step
        if failed:  # the model may hold part of a failed load: never train from that
            raise CheckpointError(f"no checkpoint could be loaded (tried {', '.join(failed)})")
        if self.info.rank == 0:
            supersede_after(self.directory, 0)
        if self.init_from is not None:
            initialise_from(self.init_from, self.sharded_state,
                            self.init_optimizer and self.optimizer is not None, self.group,
                            self.info.is_main)
        return 0

__all__ = ["Checkpointer", "FULL_MODEL_DIR"]
