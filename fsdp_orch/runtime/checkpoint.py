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
a gloo process group of their own (``write_group``: a gloo group is not safe to share between
threads, and the training thread keeps using ``group`` for the checks before a save, the
supervisor's checkpoint requests and the interval's agreement); training continues meanwhile.
Rank 0 commits from the writer thread as soon as the write is done. At most one save is in
flight: the next save, and :meth:`Checkpointer.finalize`, wait for it. A rank that dies with a
save in flight (``checkpoint_crash`` crashes it inside the writer) leaves it uncommitted.
``async_save="auto"`` saves in the background where that is worth it and safe (decided by all
ranks at the first save: :func:`~fsdp_orch.runtime.dcp_writing.async_choice`).

``COMMITTED`` is written only once the save is durable: every file fsynced, and the folders that
name them (:mod:`~fsdp_orch.runtime.ckpt_files`). When to save is a
:class:`~fsdp_orch.runtime.save_schedule.SaveSchedule`: every ``interval`` steps, or ``auto``.

The parts: a checkpoint's files (:mod:`~fsdp_orch.runtime.ckpt_files`), DCP's writers
(:mod:`~fsdp_orch.runtime.dcp_writing`), the check before a save
(:mod:`~fsdp_orch.runtime.ckpt_preflight`), the pieces of a restore
(:mod:`~fsdp_orch.runtime.ckpt_restore`) and the consolidated model at the end
(:mod:`~fsdp_orch.runtime.full_model`).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
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
from fsdp_orch.runtime.ckpt_preflight import agree_on_async, preflight_save
from fsdp_orch.runtime.ckpt_restore import (
    exception_summary,
    initialise_from,
    readable_paths,
    restore_candidates,
    restore_rank_state,
    saved_step_and_world,
    set_aside_unloadable,
    supersede_after,
)
from fsdp_orch.runtime.dcp_writing import CachingStager, CrashingWriter, DurableWriter, no_crc32
from fsdp_orch.runtime.dist import DistInfo
from fsdp_orch.runtime.full_model import write_full_model
from fsdp_orch.runtime.heartbeat import HeartbeatWriter
from fsdp_orch.runtime.save_schedule import SaveSchedule
from fsdp_orch.runtime.sharded_state import Fsdp2State, ShardedState
from fsdp_orch.vocab.save_interval import DEFAULT_AUTO_MTBF_S, SaveInterval
from fsdp_orch.vocab.states import HeartbeatState


class Checkpointer:
    """Save and restore model + optimizer (+ step, RNG states and ``extras``) of one job."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None, *,
                 directory: Path, info: DistInfo, keep_last: int = 3,
                 interval: int | str = 100, async_save: bool | str = False, resume: str = "auto",
                 full_at_end: bool = False, attempt: int = 0, timeout_s: float = 600.0,
                 heartbeat: HeartbeatWriter | None = None, faults: FaultInjector | None = None,
                 extras: dict[str, Any] | None = None, sharded_state: ShardedState | None = None,
                 init_from: Path | None = None, init_optimizer: bool = False,
                 mtbf_s: float = DEFAULT_AUTO_MTBF_S, observed_mtbf: bool = False,
                 on_interval: Callable[[SaveInterval], None] | None = None):
        """``interval``: steps between saves, or ``"auto"`` (chosen with ``mtbf_s``, the job's
        time between failures, ``observed_mtbf`` when it is the job's own, and told to
        ``on_interval``); ``async_save``: True, False or ``"auto"``."""
        from datetime import timedelta

        self.model = model
        self.optimizer = optimizer
        self.sharded_state = sharded_state or Fsdp2State(model, optimizer)
        self.directory = Path(directory).expanduser()
        self.info = info
        self.keep_last = keep_last
        self.schedule = SaveSchedule(interval, mtbf_s=mtbf_s, observed=observed_mtbf)
        self.on_interval = on_interval
        self.async_save = async_save is True or async_save == "auto"
        self._async_auto = async_save == "auto"  # decided by every rank at the first save
        self._finishing = False
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
        self._pending: tuple[int, Path, Future[Any], threading.Event] | None = None
        self._stager = CachingStager() if self.async_save else None
        self._pruner: threading.Thread | None = None
        # The training thread's checkpoint collectives: sync saves, the preflight, the restore
        # choice, the interval's agreement, the checkpoint requests. Async saves write over a
        # group of their own, from their background thread.
        self._timeout = timedelta(seconds=timeout_s)
        self.group = dist.new_group(backend="gloo", timeout=self._timeout)
        self.write_group = (dist.new_group(backend="gloo", timeout=self._timeout)
                            if async_save is True else self.group)  # auto: at the first save

    @property
    def interval(self) -> int:
        """The steps between saves in force (``auto``: the latest choice)."""
        return self.schedule.steps

    def _beat(self, state: str) -> None:
        if self.heartbeat is not None:
            self.heartbeat.beat(state=state)

    # --- save ----------------------------------------------------------------------------------

    def maybe_save(self, step: int) -> bool:
        """Call once a step. Save when ``step`` is due (a multiple of the interval; ``auto``: the
        interval's steps after the last save); True when a save started."""
        self.schedule.stepped(step, time.monotonic())
        if self.schedule.due(step, self.last_saved_step):
            self.save(step)
            return True
        self.schedule.rested(step, time.monotonic())
        return False

    def save(self, step: int) -> None:
        """Save the state after ``step`` steps (sync, or started in the background when async)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException

        started = time.perf_counter()
        self._beat(HeartbeatState.SAVING.value)
        path = self.directory / step_dir_name(step)
        try:
            self.wait()
            self.wait_seconds.append(time.perf_counter() - started)
            state = self.sharded_state.for_save()
            nbytes = self.sharded_state.nbytes(state)
            preflight_save(self.directory, path, nbytes, self.info, self.group)
            if self._async_auto:
                self._decide_async(nbytes)
            files.write_rank_state(path, self.info.rank, step, self.info.world_size,
                                   self.info.device, self.extras)
            writer: DurableWriter
            if self.faults is not None and self.faults.checkpoint_crash_due(step):
                writer = CrashingWriter(path, self.info.rank, self.faults, step)
            else:
                writer = DurableWriter(path, self.info.rank)
            if self.async_save:
                response = dcp.async_save(state, storage_writer=writer,
                                          process_group=self.write_group,
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
            self._beat(HeartbeatState.TRAINING.value)
        self.last_saved_step = step
        self.block_seconds.append(time.perf_counter() - started)
        self.schedule.saved(self.block_seconds[-1])
        if self.schedule.auto and not self._finishing:
            self._choose_interval()
        self.schedule.rested(step, time.monotonic())

    def _decide_async(self, nbytes: int) -> None:
        """``async_save: auto``, at the first save, on every rank alike: in the background, over a
        group made now, or synchronously from now on."""
        self._async_auto = False
        if agree_on_async(nbytes, self.info, self.group):
            self.write_group = dist.new_group(backend="gloo", timeout=self._timeout)
        else:
            self.async_save, self._stager = False, None

    def _choose_interval(self) -> None:
        """``interval: auto``, after each save, on every rank: the largest of the ranks' save
        costs and step times, so that every rank chooses the same interval."""
        agreed = torch.tensor(self.schedule.measured(), dtype=torch.float64)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self.group)
        chosen = self.schedule.choose(float(agreed[0]), float(agreed[1]))
        if chosen is not None and self.on_interval is not None:
            self.on_interval(chosen)

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

    def _commit_async(self, future: Future[Any], step: int, path: Path,
                      done: threading.Event) -> None:
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
        self._finishing = True  # no interval to choose any more
        if step is not None and step > 0 and step != self.last_saved_step:
            self.save(step)
        self.wait()
        self._join_pruner()
        if self.full_at_end and step is not None:
            self.save_full(step)

    def save_full(self, step: int) -> Path:
        """Gather the full model on rank 0 (CPU) and write ``<dir>/full/model.pt`` atomically."""
        self._beat(HeartbeatState.SAVING.value)
        try:
            return write_full_model(self.model, self.directory, step, self.info.rank, self.group)
        finally:
            self._beat(HeartbeatState.TRAINING.value)

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
        tried: list[CheckpointInfo] = []  # rank 0's candidates, newest first
        if self.info.rank == 0:
            try:
                tried = self.candidates()
                choice = [readable_paths(tried)]
            except CheckpointError as exc:
                choice = [exc]
        dist.broadcast_object_list(choice, src=0, group=self.group)
        if isinstance(choice[0], Exception):
            raise CheckpointError(str(choice[0]))
        failed: dict[str, str] = {}  # path -> why its load failed
        for raw in choice[0]:
            path = Path(raw)
            state = self.sharded_state.for_load()
            started = time.perf_counter()
            try:
                dcp.load(state, checkpoint_id=str(path), process_group=self.group,
                         storage_reader=files.trusted_reader(path),
                         planner=self.sharded_state.load_planner())
            except (Exception, CheckpointException) as exc:  # DCP's own is a BaseException
                failed[str(path)] = f"load failed ({exception_summary(exc)})"
                warn(f"skipping checkpoint {path}: {failed[str(path)]}; trying an older one")
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
                set_aside_unloadable([c.path for c in tried if c.step > step], failed,
                                     self.attempt, path)
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

__all__ = ["Checkpointer"]
