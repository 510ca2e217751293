"""How the estimate shards the model (torch): FSDP2's ``fully_shard`` on each layer, on the
modules the recipe shards apart and on the root, or FSDP1's ``FullyShardedDataParallel`` with its
flat parameters, each as the job's options say; and activation checkpointing as the recipe says
(every layer, every Nth, or torchtitan's op policy)."""

from __future__ import annotations

from typing import Any

from fsdp_orch.fit.setup import FitSetup

# torchtitan's op policy (torchtitan/models/llama3/infra/parallelize.py, _save_list): the outputs
# of these ops are saved, every other matmul's too; the rest is recomputed in the backward pass
SAVED_OPS = ("mm", "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
             "max")


FSDP1_NAMES = {"HYBRID_SHARD_ZERO2": "_HYBRID_SHARD_ZERO2"}


def mesh_for(setup: FitSetup) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    shape = setup.mesh_shape
    names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
    return init_device_mesh("cpu", shape, mesh_dim_names=names)


def layers_of(model: Any, setup: FitSetup) -> list[tuple[Any, str, Any]]:
    """(parent, name, module) of each module wrapped as one FSDP unit (a transformer layer)."""
    if setup.wrap == "NO_WRAP":
        return []
    wanted = set(setup.layer_classes) or set(getattr(model, "_no_split_modules", None) or ())
    found = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child).__name__ in wanted:
                found.append((parent, name, child))
    return found


def apart_of(model: Any, setup: FitSetup) -> list[Any]:
    """The modules the recipe shards apart (``fit.shard_apart``), by their attribute names."""
    wanted = set(setup.fit.shard_apart)
    return [child for parent in model.modules() for name, child in parent.named_children()
            if name in wanted]


def checkpointed(layers: list[tuple[Any, str, Any]], setup: FitSetup) -> list[tuple[Any, str, Any]]:
    """Each layer wrapped in ``checkpoint_wrapper`` as the recipe says, in its parent's place."""
    mode = setup.checkpointing
    if mode == "none":
        return layers
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        checkpoint_wrapper,
    )

    out = []
    for index, (parent, name, layer) in enumerate(layers, start=1):
        if mode == "selective-layer" and index % setup.fit.checkpoint_every:
            out.append((parent, name, layer))
            continue
        extra: dict[str, Any] = ({"context_fn": _op_policy_contexts} if mode == "selective-op"
                                 else {})
        if setup.fsdp_version == 1:
            # FSDP1 casts a unit's flat parameter at its own pre-forward, which the recompute
            # meets in another state (PEFT's adapter reads its weight's dtype first): the saved
            # and recomputed dtypes differ, which the reentrant checkpointing FSDP1 recipes use
            # (PEFT's, Answer.AI's) never checks; the memory is the same
            extra["determinism_check"] = "none"
        layer = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT, **extra)
        setattr(parent, name, layer)
        out.append((parent, name, layer))
    return out


def _op_policy_contexts() -> Any:
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    saved = {getattr(torch.ops.aten, op).default for op in SAVED_OPS
             if hasattr(torch.ops.aten, op)}
    mm = torch.ops.aten.mm.default
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        if func == mm:
            key = "recompute" if ctx.is_recompute else "forward"
            counts[key] += 1
            if counts[key] % 2 == 0:  # every other matmul recomputed
                return CheckpointPolicy.PREFER_RECOMPUTE
        if func in saved:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def precision_dtypes(setup: FitSetup) -> tuple[Any, Any] | None:
    """Mixed precision's (param dtype, reduce dtype), for either FSDP; None without it."""
    import torch

    if setup.mixed_precision == "no":
        return None
    low = torch.bfloat16 if setup.mixed_precision == "bf16" else torch.float16
    return low, torch.float32 if setup.fit.reduce_dtype == "float32" else low


def shard(model: Any, setup: FitSetup, mesh: Any) -> Any:
    """The model sharded: FSDP2's in place (the same module returned), FSDP1's a new root."""
    if setup.fsdp_version == 1:
        return _shard_fsdp1(model, setup, mesh)
    _shard_fsdp2(model, setup, mesh)
    return model


def _shard_fsdp2(model: Any, setup: FitSetup, mesh: Any) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dtypes = precision_dtypes(setup)
    policy = MixedPrecisionPolicy()
    if dtypes is not None:
        policy = MixedPrecisionPolicy(param_dtype=dtypes[0], reduce_dtype=dtypes[1])
    options = {"mesh": mesh, "reshard_after_forward": setup.reshard_after_forward,
               "mp_policy": policy}
    for module in apart_of(model, setup):
        fully_shard(module, **options)
    for _, _, layer in checkpointed(layers_of(model, setup), setup):
        fully_shard(layer, **options)
    fully_shard(model, **options)


def _shard_fsdp1(model: Any, setup: FitSetup, mesh: Any) -> Any:
    """FSDP1 as accelerate sets it up: each layer (and, for LoRA without ``use_orig_params``,
    each trainable leaf module: PEFT's ``fsdp_auto_wrap_policy``) one flat parameter; then
    checkpointing applied on the wrapped layers. The model is wrapped in place: its children
    are swapped for FSDP units, and the root returned."""
    import functools

    import torch
    from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import (
        _or_policy,
        lambda_auto_wrap_policy,
        transformer_auto_wrap_policy,
    )

    layer_types = {type(layer) for _, _, layer in layers_of(model, setup)}
    layer_types |= {type(m) for m in apart_of(model, setup)}

    def trainable_leaf(module: Any) -> bool:
        return (not list(module.named_children()) and getattr(module, "weight", None) is not None
                and module.weight.requires_grad)

    policies: list[Any] = [functools.partial(transformer_auto_wrap_policy,
                                             transformer_layer_cls=layer_types)]
    if not setup.use_orig_params and any(p.requires_grad for p in model.parameters()) and any(
            not p.requires_grad for p in model.parameters()):
        policies.append(functools.partial(lambda_auto_wrap_policy, lambda_fn=trainable_leaf))
    wrap = functools.partial(_or_policy, policies=policies) if layer_types else None
    dtypes = precision_dtypes(setup)
    precision = None
    if dtypes is not None:
        precision = MixedPrecision(param_dtype=dtypes[0], reduce_dtype=dtypes[1],
                                   buffer_dtype=dtypes[0])
    prefetch = (None if setup.backward_prefetch == "NO_PREFETCH"
                else BackwardPrefetch[setup.backward_prefetch])
    strategy = ShardingStrategy[FSDP1_NAMES.get(setup.strategy, setup.strategy)]
    if strategy == ShardingStrategy.SHARD_GRAD_OP and setup.reshard_override:
        strategy = ShardingStrategy.FULL_SHARD
    extra = {"device_mesh": mesh} if strategy in (
        ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2) else {}
    wrapped = FSDP(model, auto_wrap_policy=wrap, sharding_strategy=strategy,
                   mixed_precision=precision, use_orig_params=setup.use_orig_params,
                   backward_prefetch=prefetch, forward_prefetch=setup.forward_prefetch,
                   limit_all_gathers=True, device_id=torch.device("cpu"), **extra)
    if setup.checkpointing != "none":
        _checkpoint_fsdp1(wrapped, setup, tuple(layer_types))
    return wrapped


def _checkpoint_fsdp1(wrapped: Any, setup: FitSetup, layer_types: tuple[type, ...]) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    # inside each unit, as accelerate's apply_activation_checkpointing puts it: the unit gathers
    # its flat parameter (and casts it) once, outside what is recomputed
    inner = [(unit, "_fsdp_wrapped_module", unit.module) for unit in wrapped.modules()
             if isinstance(unit, FSDP) and isinstance(unit.module, layer_types)]
    checkpointed(inner, setup)


__all__ = ["SAVED_OPS", "apart_of", "checkpointed", "layers_of", "precision_dtypes", "mesh_for",
           "shard"]
