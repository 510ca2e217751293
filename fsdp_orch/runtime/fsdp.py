"""FSDP2 (``fully_shard``) from the job's ``fsdp:`` options
(accelerate's names), plus the plan it built.

How each option maps (FSDP2 has no flat parameters, so ``use_orig_params`` is always true):

* ``sharding_strategy``: FULL_SHARD / SHARD_GRAD_OP shard over a 1-D mesh of all ranks with
  ``reshard_after_forward`` True / False. HYBRID_SHARD / HYBRID_SHARD_ZERO2 use a 2-D mesh
  (nodes, ranks per node): replicate across nodes, shard within a node (HSDP). NO_SHARD is HSDP
  with a shard dimension of size 1, i.e. every rank holds everything and gradients are
  all-reduced (DDP). ``reshard_after_forward``, when given, overrides the strategy's value for
  every module; otherwise the root keeps its parameters after forward (FSDP2's advice: backward
  needs them first).
* ``auto_wrap_policy``: each wrapped submodule becomes one FSDP2 unit (one all-gather and one
  reduce-scatter), bottom-up, the root last. TRANSFORMER_BASED_WRAP: modules whose class name is in
  ``transformer_layer_cls_to_wrap`` (default: the model's ``_no_split_modules``); SIZE_BASED_WRAP:
  modules with at least ``min_num_params`` parameters not already in a wrapped descendant
  (containers without a forward, such as ModuleList, are skipped as in FSDP1); NO_WRAP: the root.
* ``mixed_precision``: ``MixedPrecisionPolicy(param_dtype=bf16|fp16, reduce_dtype=float32)``.
* ``offload_params``: ``CPUOffloadPolicy`` (parameters, gradients and optimizer step on CPU).
* ``activation_checkpointing``: ``checkpoint_wrapper`` (non-reentrant) around the layer modules
  (the layer classes, else the wrapped submodules) before sharding.
* ``forward_prefetch``: each wrapped layer prefetches the next one's all-gather in forward
  (``set_modules_to_forward_prefetch``); FSDP1 recorded the order at run time, we use module order.
* ``backward_prefetch``: BACKWARD_PRE is FSDP2's default (prefetch the previous layer in
  backward). BACKWARD_POST has no FSDP2 counterpart and behaves as BACKWARD_PRE (noted in the
  plan). NO_PREFETCH: each module's backward-prefetch list is itself, already unsharded at that
  point, so nothing is fetched early.
* ``sync_module_states`` / ``cpu_ram_efficient_loading``: after sharding, rank 0's weights are
  broadcast into every rank's shards (``set_model_state_dict(..., broadcast_from_rank0=True)``).
  With ``cpu_ram_efficient_loading`` and a model factory, ranks other than 0 build the model on
  the meta device (no memory), and ``to_empty`` allocates only their shards before the broadcast.
  Non-persistent buffers are not in the state dict: a model built on meta must recreate them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from fsdp_orch.jobspec.fsdp_options import FsdpOptions
from fsdp_orch.runtime.dist import DistInfo

_RESHARD = {"FULL_SHARD": True, "SHARD_GRAD_OP": False, "HYBRID_SHARD": True,
            "HYBRID_SHARD_ZERO2": False, "NO_SHARD": False}
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_CONTAINERS = (nn.ModuleList, nn.ModuleDict)


@dataclass
class ShardPlan:
    """What :func:`shard_model` did, for logs and for tests where a CPU cannot run an option."""

    sharding_strategy: str
    mesh_shape: tuple[int, ...]
    mesh_dim_names: tuple[str, ...]
    reshard_after_forward: bool  # for the wrapped layers
    root_reshard_after_forward: bool
    auto_wrap_policy: str
    layer_classes: list[str]
    wrapped: list[str]  # module names in fully_shard order; "" is the root, always last
    activation_checkpointing: list[str]
    param_dtype: str | None
    reduce_dtype: str | None
    offload_params: bool
    forward_prefetch: list[tuple[str, str]]  # (module, the module it prefetches in forward)
    backward_prefetch: str  # what FSDP2 does: "previous-layer (default)" or "none"
    init: str  # "local", "broadcast_from_rank0" or "meta+broadcast_from_rank0"
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _post_order(module: nn.Module, prefix: str = "") -> Iterator[tuple[str, nn.Module]]:
    for name, child in module.named_children():
        yield from _post_order(child, f"{prefix}{name}.")
    yield prefix.rstrip("."), module


def layer_classes(model: nn.Module, options: FsdpOptions) -> list[str]:
    """The transformer layer class names: the option, else the model's ``_no_split_modules``."""
    names = list(options.transformer_layer_cls_to_wrap)
    if not names:
        names = [str(n) for n in (getattr(model, "_no_split_modules", None) or [])]
    return names


def wrap_targets(model: nn.Module, options: FsdpOptions) -> list[str]:
    """Names of the submodules to shard as their own unit, bottom-up (the root is not listed).

    Raises ValueError when a named layer class does not occur in the model (a typo must not
    silently mean "shard the root only").
    """
    policy = options.auto_wrap_policy
    if policy == "NO_WRAP":
        return []
    if policy == "TRANSFORMER_BASED_WRAP":
        classes = layer_classes(model, options)
        present = {type(m).__name__ for m in model.modules()}
        missing = [c for c in classes if c not in present]
        if missing:
            raise ValueError(
                f"fsdp.transformer_layer_cls_to_wrap: no module of class {', '.join(missing)} in "
                f"the model; classes present: {', '.join(sorted(present))}")
        return [name for name, m in _post_order(model) if name and type(m).__name__ in classes]
    # SIZE_BASED_WRAP, as FSDP1's size_based_auto_wrap_policy: count what is not yet wrapped.
    wrapped: list[str] = []
    covered: set[int] = set()
    for name, module in _post_order(model):
        if not name or isinstance(module, _CONTAINERS):
            continue
        own = [p for p in module.parameters() if id(p) not in covered]
        if sum(p.numel() for p in own) >= options.min_num_params:
            wrapped.append(name)
            covered.update(id(p) for p in own)
    return wrapped


def _outermost(names: list[str]) -> list[str]:
    return [n for n in names if not any(n.startswith(o + ".") for o in names if o != n)]


def layers_to_checkpoint(model: nn.Module, classes: list[str], targets: list[str]) -> list[str]:
    """The modules activation checkpointing wraps: the outermost of the layer classes, else of the
    wrap targets (a checkpoint inside a checkpoint would recompute twice)."""
    by_class = [n for n, m in model.named_modules() if n and type(m).__name__ in classes]
    return _outermost(by_class or targets)


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    setattr(_resolve(model, parent_name), attr, new)


def _mesh(strategy: str, info: DistInfo):
    from torch.distributed.device_mesh import init_device_mesh

    world, per_node = info.world_size, info.local_world_size
    shape: tuple[int, ...]
    names: tuple[str, ...]
    if strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
        shape, names = (world,), ("shard",)
    elif strategy == "NO_SHARD":
        shape, names = (world, 1), ("replicate", "shard")
    else:
        if world % per_node:
            raise ValueError(f"fsdp.sharding_strategy {strategy}: world size {world} is not a "
                             f"multiple of the ranks per node ({per_node})")
        shape, names = (world // per_node, per_node), ("replicate", "shard")
    return init_device_mesh(info.device.type, shape, mesh_dim_names=names), shape, names


def _notes(options: FsdpOptions) -> list[str]:
    notes = []
    if not options.use_orig_params:
        notes.append("use_orig_params: false ignored; FSDP2 always keeps the original parameters")
    if options.version == 1:
        notes.append("version 1 requested; this runtime shards with FSDP2 (fully_shard)")
    if options.xla:
        notes.append("xla: true, but this process has no XLA device (PJRT_DEVICE and torch_xla); "
                     "sharding with FSDP2")
    if options.backward_prefetch == "BACKWARD_POST":
        notes.append("backward_prefetch BACKWARD_POST has no FSDP2 counterpart; "
                     "using FSDP2's default (prefetch the previous layer, as BACKWARD_PRE)")
    return notes


def shard_model(model_or_factory: nn.Module | Callable[[], nn.Module], options: FsdpOptions,
                info: DistInfo) -> tuple[nn.Module, ShardPlan]:
    """Apply activation checkpointing and ``fully_shard`` per
    ``options``; broadcast rank 0's weights."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import fully_shard

    notes = _notes(options)
    model = _build(model_or_factory, options, info)
    any_meta, rank0_meta, broadcast = _weights_source(model, options, info, notes)
    classes = layer_classes(model, options)
    targets = wrap_targets(model, options)
    preorder = [n for n, _ in model.named_modules()]
    ac_targets = _checkpoint_activations(model, options, classes, targets, notes)
    full_state = model.state_dict() if broadcast and info.rank == 0 else {}

    mesh, shape, names = _mesh(options.sharding_strategy, info)
    layer_reshard, root_reshard = _reshard_after_forward(options)
    mp, offload = _policies(options, info)
    kwargs = {"mesh": mesh, "mp_policy": mp, "offload_policy": offload}

    for name in targets:
        fully_shard(_resolve(model, name), reshard_after_forward=layer_reshard, **kwargs)
    fully_shard(model, reshard_after_forward=root_reshard, **kwargs)

    if any_meta and not rank0_meta:
        model.to_empty(device="cpu" if options.offload_params else info.device)
    if broadcast:
        set_model_state_dict(model, full_state, options=StateDictOptions(
            full_state_dict=True, broadcast_from_rank0=True))
        del full_state

    forward_pairs, backward = _set_prefetch(model, options, targets, preorder)
    init = "local"
    if broadcast:
        init = "meta+broadcast_from_rank0" if any_meta else "broadcast_from_rank0"
    plan = ShardPlan(
        sharding_strategy=options.sharding_strategy, mesh_shape=tuple(shape), mesh_dim_names=names,
        reshard_after_forward=layer_reshard, root_reshard_after_forward=root_reshard,
        auto_wrap_policy=options.auto_wrap_policy, layer_classes=classes, wrapped=[*targets, ""],
        activation_checkpointing=ac_targets,
        param_dtype=str(mp.param_dtype).removeprefix("torch.") if mp.param_dtype else None,
        reduce_dtype=str(mp.reduce_dtype).removeprefix("torch.") if mp.reduce_dtype else None,
        offload_params=options.offload_params, forward_prefetch=forward_pairs,
        backward_prefetch=backward, init=init, notes=notes)
    return model, plan


def _build(model_or_factory: nn.Module | Callable[[], nn.Module], options: FsdpOptions,
           info: DistInfo) -> nn.Module:
    """The model given, or the factory's: on the meta device on ranks other than 0 under
    ``cpu_ram_efficient_loading`` (their shards are allocated after sharding)."""
    if isinstance(model_or_factory, nn.Module):
        return model_or_factory
    if options.cpu_ram_efficient_loading and info.rank != 0:
        with torch.device("meta"):
            return model_or_factory()
    return model_or_factory()


def _weights_source(model: nn.Module, options: FsdpOptions, info: DistInfo,
                    notes: list[str]) -> tuple[bool, bool, bool]:
    """Whether any rank's model is on the meta device, whether rank 0's is (a collective each),
    and whether rank 0's weights are to be broadcast after sharding; a note added where rank 0 has
    none to broadcast."""
    on_meta = any(p.is_meta for p in model.parameters())
    any_meta = _all_ranks_any(on_meta, info)
    rank0_meta = _rank0_flag(on_meta, info)
    asked = options.sync_module_states or options.cpu_ram_efficient_loading
    if rank0_meta and any_meta and asked and info.world_size > 1:
        notes.append("model on the meta device on rank 0: no weights to broadcast; call "
                     "model.to_empty(device=...) and initialise the weights yourself")
    broadcast = info.world_size > 1 and not rank0_meta and (asked or any_meta)
    return any_meta, rank0_meta, broadcast


def _checkpoint_activations(model: nn.Module, options: FsdpOptions, classes: list[str],
                            targets: list[str], notes: list[str]) -> list[str]:
    """Wraps the layers to checkpoint (:func:`layers_to_checkpoint`) in ``checkpoint_wrapper`` when
    ``activation_checkpointing`` asks; returns their names (a note added where there are none)."""
    if not options.activation_checkpointing:
        return []
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    ac_targets = layers_to_checkpoint(model, classes, targets)
    if not ac_targets:
        notes.append("activation_checkpointing: no layer to checkpoint (no layer classes and "
                     "no wrapped submodules)")
    for name in ac_targets:
        _replace(model, name, checkpoint_wrapper(_resolve(model, name)))
    return ac_targets


def _reshard_after_forward(options: FsdpOptions) -> tuple[bool, bool]:
    """``reshard_after_forward`` for the wrapped layers and for the root."""
    layer_reshard = (options.reshard_after_forward if options.reshard_after_forward is not None
                     else _RESHARD[options.sharding_strategy])
    root_reshard = (options.reshard_after_forward if options.reshard_after_forward is not None
                    else False)
    if options.sharding_strategy == "NO_SHARD":
        layer_reshard = root_reshard = False
    return layer_reshard, root_reshard


def _policies(options: FsdpOptions, info: DistInfo) -> tuple[Any, Any]:
    """FSDP2's mixed precision and offload policies for ``options``."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

    mp = MixedPrecisionPolicy()
    if options.mixed_precision in _DTYPES:
        mp = MixedPrecisionPolicy(param_dtype=_DTYPES[options.mixed_precision],
                                  reduce_dtype=torch.float32)
    offload = CPUOffloadPolicy(pin_memory=info.device.type == "cuda") if options.offload_params \
        else OffloadPolicy()
    return mp, offload


def _set_prefetch(model: nn.Module, options: FsdpOptions, targets: list[str],
                  preorder: list[str]) -> tuple[list[tuple[str, str]], str]:
    """Sets the sharded model's prefetching: each outermost wrapped layer prefetches the next one's
    all-gather in forward (``forward_prefetch``), in module order (``preorder``); nothing is
    prefetched in backward under ``NO_PREFETCH``. Returns the forward pairs and what backward
    does."""
    from torch.distributed.fsdp import FSDPModule

    ordered = sorted(_outermost(targets), key=preorder.index)  # module (≈ forward) order
    forward_pairs: list[tuple[str, str]] = []
    if options.forward_prefetch and ordered:
        chain = ["", *ordered]
        for a, b in zip(chain[:-1], chain[1:], strict=True):
            following = _fsdp(model, b, FSDPModule)
            _fsdp(model, a, FSDPModule).set_modules_to_forward_prefetch([following])
            forward_pairs.append((a, b))
    backward = "previous-layer (default)"
    if options.backward_prefetch == "NO_PREFETCH":
        for name in [*targets, ""]:
            module = _fsdp(model, name, FSDPModule)
            module.set_modules_to_backward_prefetch([module])
        backward = "none"
    return forward_pairs, backward


def _resolve(model: nn.Module, name: str) -> nn.Module:
    """``model.get_submodule(name)`` by the original name, looking through checkpoint wrappers."""
    module = model
    for part in name.split(".") if name else []:
        inner = module._modules.get(part)
        wrapped = module._modules.get("_checkpoint_wrapped_module")
        if inner is None and wrapped is not None:
            inner = wrapped._modules.get(part)
        if inner is None:
            raise KeyError(f"no submodule {name!r}")
        module = inner
    return module


def _fsdp(model: nn.Module, name: str, kind: type) -> Any:
    module = _resolve(model, name)
    if not isinstance(module, kind):
        raise TypeError(f"module {name or '<root>'} is not sharded")
    return module


def _all_ranks_any(flag: bool, info: DistInfo) -> bool:
    if info.world_size == 1:
        return flag
    t = torch.tensor([1 if flag else 0], device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _rank0_flag(flag: bool, info: DistInfo) -> bool:
    if info.world_size == 1:
        return flag
    t = torch.tensor([1 if flag else 0], device=info.device)
    dist.broadcast(t, src=0)
    return bool(t.item())


__all__ = ["ShardPlan", "layer_classes", "layers_to_checkpoint", "shard_model", "wrap_targets"]
