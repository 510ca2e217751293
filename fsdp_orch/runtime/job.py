"""The object a training script holds: process group, device, sharding, checkpoints, heartbeats."""

from __future__ import annotations

import faulthandler
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from fsdp_orch.bootstrap.faults import FaultInjector, parse_faults
from fsdp_orch.runtime.checkpoint import Checkpointer
from fsdp_orch.runtime.dist import DistInfo, init_distributed, shutdown
from fsdp_orch.runtime.fsdp import ShardPlan, shard_model
from fsdp_orch.runtime.heartbeat import HeartbeatWriter, set_default_writer
from fsdp_orch.runtime.notices import RuntimeNotices
from fsdp_orch.runtime.settings import Settings, from_env
from fsdp_orch.runtime.xla_fsdp import (
    XlaSharded,
    checkpoint_state,
    shard_batch,
    shard_on_xla,
    xla_full_state,
)
from fsdp_orch.vocab.metrics import CHECKPOINT_BLOCK_S
from fsdp_orch.vocab.save_interval import SaveInterval
from fsdp_orch.vocab.states import HeartbeatState

# ``checkpoint.interval: auto``: the notice of each interval chosen (``fsdp-orch events``,
# ``status``), beside rank 0's log line.
INTERVAL_NOTICE = "checkpoint_interval"


class Job:
    """One rank's view of the job. Make it with :func:`fsdp_orch.runtime.setup`."""

    def __init__(self, settings: Settings, info: DistInfo, heartbeat: HeartbeatWriter,
                 faults: FaultInjector):
        self.settings = settings
        self.info = info
        self.heartbeat = heartbeat
        self.faults = faults
        self.plan: ShardPlan | XlaSharded | None = None
        self.ckpt: Checkpointer | None = None
        self.last_step = 0
        self._last_time: float | None = None
        self._finished = False
        self._request_served = False
        self.notices = RuntimeNotices(settings.run_dir, settings.job_id, settings.attempt,
                                      info.rank)

    @property
    def device(self) -> torch.device:
        return self.info.device

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    @property
    def is_main(self) -> bool:
        return self.info.rank == 0

    def log(self, message: str) -> None:
        """Print on rank 0 only (stderr, flushed)."""
        if self.is_main:
            print(f"[fsdp-orch] {message}", file=sys.stderr, flush=True)

    def shard(self, model: nn.Module | Callable[[], nn.Module]) -> nn.Module:
        """Shard ``model`` (or the model a zero-argument factory builds) per the job's ``fsdp:``.

        Pass a factory to let ``cpu_ram_efficient_loading`` build the model on the meta device on
        every rank but 0. The plan is kept in ``self.plan``. On an XLA device: torch_xla's FSDP
        (:mod:`fsdp_orch.runtime.xla_plan`).
        """
        if self.on_xla:
            sharded, xla = shard_on_xla(model, self.settings.fsdp, self.info)
            self.plan = xla
            mesh = (f" mesh {xla.plan.mesh_shape} {xla.plan.mesh_axis_names}" if xla.plan.spmd
                    else "")
            self.log(f"sharded on XLA: {xla.plan.wrapper}{mesh}, {len(xla.wrapped) - 1} layer(s) + "
                     f"root, init {xla.init}" + "".join(f"; {note}" for note in xla.notes))
            return sharded
        sharded, plan = shard_model(model, self.settings.fsdp, self.info)
        self.plan = plan
        self.log(f"sharded: {plan.sharding_strategy} mesh {plan.mesh_shape}, "
                 f"{len(plan.wrapped) - 1} layer(s) + root, init {plan.init}"
                 + "".join(f"; {note}" for note in plan.notes))
        return sharded

    @property
    def on_xla(self) -> bool:
        return self.info.device.type == "xla"

    def place_batch(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` on this rank's device; under FSDPv2 (SPMD) also split on dim 0 over the
        ``fsdp`` mesh axis, so each XLA device computes its rows."""
        tensor = tensor.to(self.info.device)
        if self.on_xla and self.info.xla_spmd:
            return shard_batch(tensor)
        return tensor

    def sync(self) -> None:
        """End of a step's computation: on XLA, compile and run the step's graph now
        (``torch_xla.sync()``), else every step would add to one ever longer graph. Elsewhere a
        no-op. Call it after ``optimizer.step()``."""
        if self.on_xla:
            import torch_xla

            torch_xla.sync()

    def mean(self, value: torch.Tensor) -> float:
        """The mean of ``value`` (a scalar tensor) over all ranks, as a float. Under SPMD the
        default group is gloo, which takes CPU tensors only: the value is copied off the device."""
        tensor = value.detach()
        tensor = tensor.cpu() if self.on_xla and self.info.backend == "gloo" else tensor.clone()
        if self.info.world_size > 1:
            dist.all_reduce(tensor)
        return (tensor / self.info.world_size).item()

    def full_state(self, model: nn.Module) -> dict[str, torch.Tensor] | None:
        """The whole model's parameters and buffers on CPU, by name, on rank 0 (None on the
        others); every rank must call it."""
        if self.on_xla:
            return xla_full_state(model, self.info)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                    cpu_offload=True))
        # a full state dict on CPU: plain tensors only
        return cast("dict[str, torch.Tensor]", full) if self.info.rank == 0 else None

    def checkpointer(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
                     extras: dict[str, Any] | None = None) -> Checkpointer:
        """The job's checkpointer (``checkpoint:`` policy); ``step_done`` saves through it.

        ``extras``: per-rank objects saved with each checkpoint and given back by ``restore``:
        anything with ``state_dict``/``load_state_dict`` (a data loader, an LR scheduler) is
        loaded in place; other values are replaced in the dict.
        """
        policy = self.settings.checkpoint
        async_save: bool | str = policy.async_save  # True, False or "auto"
        full_at_end = (policy.save_full_at_end
                       or self.settings.fsdp.state_dict_type == "FULL_STATE_DICT")
        state = None
        if self.on_xla:  # async_save: auto means sync here, unsaid: it was never asked for
            state = checkpoint_state(model, optimizer, self.info)
            if async_save is True or full_at_end:
                self.log("on XLA checkpoints are saved synchronously and sharded only: async_save "
                         "and the full model at the end are not done")
            async_save = full_at_end = False
        observed = self.settings.observed_mtbf_s
        self.ckpt = Checkpointer(
            model, optimizer, directory=self.settings.checkpoint_dir, info=self.info,
            keep_last=policy.keep_last, interval=policy.interval, async_save=async_save,
            resume=self.settings.resume, attempt=self.settings.attempt, full_at_end=full_at_end,
            timeout_s=self.settings.watch.collective_timeout, heartbeat=self.heartbeat,
            faults=self.faults, extras=extras, sharded_state=state,
            init_from=self.settings.init_from, init_optimizer=self.settings.init_optimizer,
            mtbf_s=observed or policy.auto_mtbf, observed_mtbf=observed is not None,
            on_interval=self._interval_chosen)
        return self.ckpt

    def _interval_chosen(self, chosen: SaveInterval) -> None:
        """``interval: auto`` chose (or changed) the interval: said in rank 0's log and, as a
        notice, in the job's events."""
        message = f"checkpoint every {chosen.steps} step(s) (interval: auto): {chosen.why}"
        self.log(message)
        self.notices.notice(INTERVAL_NOTICE, message)

    def step_done(self, step: int, loss: Any = None, **metrics: Any) -> None:
        """Call after each optimizer step with the number of steps done: writes the heartbeat,
        applies injected faults, saves a checkpoint every ``checkpoint.interval`` steps.

        ``loss`` may be a tensor; reading it syncs with the device, pass None to avoid that.
        """
        now = time.monotonic()
        if self._last_time is not None:
            metrics.setdefault("step_seconds", round(now - self._last_time, 6))
        self._last_time = now
        if self.ckpt is not None and self.ckpt.block_seconds:
            metrics.setdefault(CHECKPOINT_BLOCK_S, round(sum(self.ckpt.block_seconds), 3))
        self.last_step = step
        self.heartbeat.beat(step=step, loss=loss, state=HeartbeatState.TRAINING.value, **metrics)
        self.faults.at_step_end(step)
        if self.ckpt is None:
            return
        if self._checkpoint_requested(step):
            self.log(f"checkpoint of step {step}: "
                     "the supervisor asked for one (the allocation is ending)")
            self.ckpt.save(step)
        else:
            self.ckpt.maybe_save(step)

    def _checkpoint_requested(self, step: int) -> bool:
        """Has the supervisor asked for a checkpoint (SLURM's warning before the time limit)? The
        request file appears first where the supervisor runs (node 0's view of the shared folder),
        so the ranks agree by one all-reduce of a flag per step, and all save at the same step."""
        path = self.settings.checkpoint_request
        if path is None or self._request_served or self.ckpt is None:
            return False
        flag = torch.tensor([1 if path.exists() else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.ckpt.group)
        if not int(flag.item()):
            return False
        self._request_served = True
        return step != self.ckpt.last_saved_step

    def finish(self, step: int | None = None) -> None:
        """Final checkpoint (if the last step is not saved yet), full model if asked, heartbeat
        ``done``, process group down. ``step`` defaults to the last ``step_done``."""
        if self._finished:
            return
        final = self.last_step if step is None else step
        if self.ckpt is not None:
            self.ckpt.finalize(final)
        self.heartbeat.beat(step=final, state=HeartbeatState.DONE.value)
        shutdown()
        self._finished = True

    def __enter__(self) -> Job:
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if kind is None:
            self.finish()
        # On an exception: no collectives (the other ranks may be gone); the launcher cleans up.


def setup() -> Job:
    """Read the environment and the job spec, start the process group, pick the device."""
    settings = from_env()
    # `kill -USR1 <pid>` prints every thread's Python stack: what a hung rank is waiting in
    # (unless the script handles SIGUSR1 itself, e.g. for SLURM's --signal).
    if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    faults = parse_faults(settings.fault)  # a bad FSDP_ORCH_FAULT fails before any collective
    info = init_distributed(settings.watch.collective_timeout, settings.attempt_dir,
                            xla_spmd=settings.fsdp.xla_fsdp_v2)
    heartbeat = HeartbeatWriter(settings.run_dir, settings.attempt, info.rank)
    heartbeat.beat(step=0, state=HeartbeatState.STARTING.value)
    set_default_writer(heartbeat)  # so heartbeat() from anywhere in the script writes the same file
    injector = FaultInjector(faults, info.rank, settings.attempt, settings.watch.collective_timeout)
    return Job(settings, info, heartbeat, injector)


__all__ = ["Job", "setup"]
