"""Do an :class:`~fsdp_orch.runtime.xla_plan.XlaWrapPlan` with torch_xla: the mesh, gradient
checkpointing, the wrapping, and the sharded checkpoint state.

This has never run on a TPU in this project: torch_xla does not install beside the torch used
here. It follows torch_xla 2.8+'s documented API (``SpmdFullyShardedDataParallel``,
``XlaFullyShardedDataParallel``, ``spmd.Mesh`` / ``set_global_mesh``, ``checkpoint_module``, the
SPMD planners of ``torch_xla.experimental.distributed_checkpoint``). What is tested here: the plan
(pure), the choice of layers (shared with FSDP2), and :class:`PerRankState` (no torch_xla in it).
torch_xla is imported inside the functions that need it, never when this module is imported.

Checkpoints keep the ``step-N`` layout and the commit protocol of
:mod:`~fsdp_orch.runtime.checkpoint`, so the supervisor finds the latest complete one as on any
other cluster; torch_xla's ``CheckpointManager`` is not used: it keeps its own layout, retention and
completeness rules.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from fsdp_orch.jobspec.fsdp_options import FsdpOptions
from fsdp_orch.runtime.dist import DistInfo
from fsdp_orch.runtime.fsdp import layer_classes, layers_to_checkpoint, wrap_targets
from fsdp_orch.runtime.sharded_state import state_nbytes
from fsdp_orch.runtime.xla_plan import DTYPE_SETTINGS, XlaWrapPlan, plan_xla_wrap


@dataclass
class XlaSharded:
    """What :func:`shard_on_xla` did: the plan and the modules it applied to."""

    plan: XlaWrapPlan
    layer_classes: list[str]
    wrapped: list[str]  # module names in wrapping order; "" is the root, always last
    grad_ckpt: list[str]
    init: str  # "local" or "broadcast_from_process_0"
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def shard_on_xla(model_or_factory: nn.Module | Callable[[], nn.Module], options: FsdpOptions,
                 info: DistInfo) -> tuple[nn.Module, XlaSharded]:
    """Wrap the model (built on CPU) per the plan for this job's XLA devices."""
    import torch_xla.runtime as xr

    plan = plan_xla_wrap(options, devices=xr.global_runtime_device_count(),
                         processes=info.world_size)
    model = model_or_factory if isinstance(model_or_factory, nn.Module) else model_or_factory()
    classes = layer_classes(model, options)
    targets = wrap_targets(model, options)
    if plan.broadcast_from_process_0:
        _broadcast_from_process_0(model)
    ckpt = layers_to_checkpoint(model, classes, targets) if plan.grad_ckpt else []
    notes = list(plan.notes)
    if plan.grad_ckpt and not ckpt:
        notes.append("xla_fsdp_grad_ckpt: no layer to checkpoint (no layer classes and no wrapped "
                     "submodules)")
    if ckpt:
        from torch_xla.distributed.fsdp import checkpoint_module

        for name in ckpt:
            checkpoint_module(model.get_submodule(name))  # patches forward in place
    wrap = _wrapper(plan)
    for name in targets:  # bottom-up: no target lies inside one wrapped before it
        model.set_submodule(name, wrap(model.get_submodule(name)))
    init = "broadcast_from_process_0" if plan.broadcast_from_process_0 else "local"
    return wrap(model), XlaSharded(plan=plan, layer_classes=classes, wrapped=[*targets, ""],
                                   grad_ckpt=ckpt, init=init, notes=notes)


def _wrapper(plan: XlaWrapPlan) -> Callable[[nn.Module], nn.Module]:
    if plan.spmd:
        import numpy as np
        import torch_xla.distributed.spmd as xs
        from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
            SpmdFullyShardedDataParallel,
        )

        assert plan.mesh_shape is not None and plan.mesh_axis_names is not None
        mesh = xs.Mesh(np.arange(plan.devices), plan.mesh_shape, plan.mesh_axis_names)
        xs.set_global_mesh(mesh)  # shard_batch and data loaders find it there
        return lambda module: SpmdFullyShardedDataParallel(module, mesh=mesh,
                                                           shard_output=_shard_output)
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel

    kwargs = plan.kwargs()
    for key in DTYPE_SETTINGS:  # names in the plan, torch dtypes for the wrapper
        if key in kwargs:
            kwargs[key] = getattr(torch, kwargs[key])
    return lambda module: XlaFullyShardedDataParallel(module, **kwargs)


def shard_batch(tensor: torch.Tensor) -> torch.Tensor:
    """FSDPv2: mark ``tensor`` (on the XLA device) as split on dim 0 over the ``fsdp`` mesh axis,
    so each device computes its rows. On several hosts every process passes the same global
    batch; each keeps its own devices' rows."""
    import torch_xla.distributed.spmd as xs

    return _split_on_fsdp(tensor, xs.get_global_mesh())


def _split_on_fsdp(tensor: torch.Tensor, mesh: Any) -> torch.Tensor:
    import torch_xla.distributed.spmd as xs

    xs.mark_sharding(tensor, mesh, ("fsdp", *([None] * (tensor.dim() - 1))))
    return tensor


def _shard_output(output: Any, mesh: Any) -> None:
    """FSDPv2 must see each wrapped module's output sharded on the batch; torch_xla's default
    handles a tensor or a tuple, this also a Hugging Face ``ModelOutput`` (its logits)."""
    tensor = _first_tensor(output)
    if tensor is None:
        raise TypeError(f"FSDPv2: no tensor in the module's output ({type(output).__name__}) to "
                        "shard on the fsdp axis")
    _split_on_fsdp(tensor, mesh)


def _first_tensor(output: Any) -> torch.Tensor | None:
    """The output tensor with a batch dimension: the output itself, the logits of a mapping, else
    the first such value of a tuple or mapping (a 0-dim loss has none)."""
    if isinstance(output, torch.Tensor):
        values = [output]
    elif isinstance(output, Mapping):
        values = [output["logits"]] if "logits" in output else list(output.values())
    elif isinstance(output, (tuple, list)):
        values = list(output)
    else:
        return None
    return next((v for v in values if isinstance(v, torch.Tensor) and v.dim() > 0), None)


def _broadcast_from_process_0(model: nn.Module) -> None:
    """``sync_module_states``: every process starts from process 0's weights (on CPU, before any
    is sharded; a gloo group, as the ``xla`` backend takes only XLA tensors)."""
    group = dist.new_group(backend="gloo")
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.device.type != "cpu":
            raise ValueError("fsdp.sync_module_states on XLA broadcasts the weights on CPU before "
                             "sharding: build the model on CPU, or set sync_module_states: false")
        dist.broadcast(tensor.data, src=0, group=group)
    dist.destroy_process_group(group)


def xla_full_state(model: nn.Module, info: DistInfo) -> dict[str, torch.Tensor] | None:
    """The whole model on CPU on process 0, by the unwrapped model's names. FSDPv2: the state
    dict's tensors are global (sharded over this host's devices), ``.cpu()`` gathers them.
    XlaFullyShardedDataParallel: every rank's shards are gathered to process 0 and consolidated
    with torch_xla's ``consolidate_sharded_state_dicts``."""
    if info.xla_spmd:
        full = {unwrapped_name(k): v.cpu() for k, v in model.state_dict().items()}
        return full if info.rank == 0 else None
    from torch_xla.distributed.fsdp import consolidate_sharded_state_dicts

    shards = {"model": _to_cpu(model.state_dict()),
              "shard_metadata": model.get_shard_metadata()}  # type: ignore[operator]
    everyone: list[Any] = [None] * info.world_size
    if info.world_size > 1:
        dist.all_gather_object(everyone, shards, group=dist.new_group(backend="gloo"))
    else:
        everyone = [shards]
    if info.rank != 0:
        return None
    full = consolidate_sharded_state_dicts([s["model"] for s in everyone],
                                           everyone[0]["shard_metadata"])  # the same on every rank
    return {unwrapped_name(k): v for k, v in full.items()}


def unwrapped_name(name: str) -> str:
    """A parameter's name in the model as built: the wrappers' own prefixes taken out."""
    parts = [p for p in name.split(".")
             if p not in ("_orig_module", "_fpw_module", "_fsdp_wrapped_module", "module")]
    return ".".join(parts)


# --- checkpoint state (see fsdp_orch.runtime.sharded_state.ShardedState) -------------------------

class SpmdState:
    """FSDPv2: the model's and optimizer's own state dicts (sharded XLA tensors) through DCP with
    torch_xla's SPMD planners, loaded in place. DCP reshards: a checkpoint loads on any number of
    hosts. The optimizer's state exists only after a step, so it is primed before a load."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None, processes: int):
        self.model = model
        self.optimizer = optimizer
        self.processes = processes

    def for_save(self) -> dict[str, Any]:
        state: dict[str, Any] = {"model": self.model.state_dict()}
        if self.optimizer is not None:
            state["optim"] = self.optimizer.state_dict()
        return state

    def for_load(self) -> dict[str, Any]:
        if self.optimizer is not None:
            from torch_xla.experimental.distributed_checkpoint import prime_optimizer

            prime_optimizer(self.optimizer)
        return self.for_save()

    def apply(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optim"])

    def nbytes(self, state: dict[str, Any]) -> int:
        return state_nbytes(state) // self.processes  # global tensors; each host writes its part

    def save_planner(self) -> Any:
        from torch_xla.experimental.distributed_checkpoint import SPMDSavePlanner

        return SPMDSavePlanner()

    def load_planner(self) -> Any:
        from torch_xla.experimental.distributed_checkpoint import SPMDLoadPlanner

        return SPMDLoadPlanner()


class PerRankState:
    """XlaFullyShardedDataParallel: each rank's shards of model and optimizer, with the shard
    metadata torch_xla's ``consolidate_sharded_state_dicts`` needs, as one serialized object under
    a key of the rank's own, so DCP writes it from that rank alone. Such a checkpoint loads only on
    the world size that saved it; on another,
    DCP reports the missing key ``xla_fsdp_rank_R_of_W``."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None, rank: int,
                 world_size: int):
        self.model = model
        self.optimizer = optimizer
        self.key = f"xla_fsdp_rank_{rank}_of_{world_size}"

    def for_save(self) -> dict[str, Any]:
        shards = {"model": _to_cpu(self.model.state_dict()),
                  "shard_metadata": self.model.get_shard_metadata(),  # type: ignore[operator]
                  "optimizer": _to_cpu(self.optimizer.state_dict()) if self.optimizer else None}
        buffer = io.BytesIO()
        torch.save(shards, buffer)
        return {self.key: buffer}

    def for_load(self) -> dict[str, Any]:
        return {self.key: io.BytesIO()}

    def apply(self, state: dict[str, Any]) -> None:
        buffer = state[self.key]
        buffer.seek(0)
        shards = torch.load(buffer, map_location="cpu", weights_only=False)
        self.model.load_state_dict(shards["model"])
        if self.optimizer is not None and shards["optimizer"] is not None:
            self.optimizer.load_state_dict(shards["optimizer"])

    def nbytes(self, state: dict[str, Any]) -> int:
        return state[self.key].getbuffer().nbytes

    def save_planner(self) -> Any:
        return None

    def load_planner(self) -> Any:
        return None


def checkpoint_state(model: nn.Module, optimizer: torch.optim.Optimizer | None,
                     info: DistInfo) -> SpmdState | PerRankState:
    """The checkpoint state for a model sharded by :func:`shard_on_xla` in this process."""
    if info.xla_spmd:
        return SpmdState(model, optimizer, info.world_size)
    return PerRankState(model, optimizer, info.rank, info.world_size)


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_cpu(v) for v in value)
    return value


__all__ = ["PerRankState", "SpmdState", "XlaSharded", "checkpoint_state", "shard_batch",
           "shard_on_xla", "unwrapped_name", "xla_full_state"]
