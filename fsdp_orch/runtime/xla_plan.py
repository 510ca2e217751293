"""FSDP on an XLA device (Cloud TPU): which wrapper, with what arguments, from the job's ``fsdp:``.

Pure and torch-free (the CLI may call it to check a spec before a TPU is created); what it plans
is done by :mod:`fsdp_orch.runtime.xla_fsdp`.

Which wrapper:

* FSDPv2 (``fsdp.xla_fsdp_v2: true``, the default): torch_xla's ``SpmdFullyShardedDataParallel``
  under SPMD. The default because it is what torch_xla recommends for TPUs, and because it fits
  how the ``xla`` launcher starts a job: the same command once on every worker, one process per
  host that drives all the host's chips. Parameters are sharded on the ``fsdp`` axis of a
  (devices, 1) mesh named ("fsdp", "tensor"), the mesh Hugging Face's Trainer builds for
  ``xla_fsdp_v2`` ("tensor" is a placeholder of size 1); the XLA compiler places the collectives.
  Its checkpoints load on any number of hosts (DCP reshards).
* ``XlaFullyShardedDataParallel`` (``xla_fsdp_v2: false``): torch_xla's first FSDP, one process
  per chip (the script starts its training function with ``torch_xla.launch``); the wrapper issues
  the collectives and takes ``xla_fsdp_settings`` as its keyword arguments. Its checkpoints are
  per rank and load only on as many chips as saved them.

``xla_fsdp_settings`` are XlaFullyShardedDataParallel's keyword arguments (torch_xla 2.8+ names).
Unknown keys are refused, with a "did you mean": a typo would otherwise fail only as a TypeError
on the TPU after the slice was created, and under FSDPv2, which takes none of them, would be
ignored silently. Dtypes stay names ("bfloat16"), so this module needs no torch. A setting wins
over what a default ``fsdp:`` option implies; one that contradicts an option set otherwise
(SHARD_GRAD_OP, reshard_after_forward, mixed_precision) is refused, naming both.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass
from typing import Any

from fsdp_orch.jobspec.fsdp_options import FsdpOptions
from fsdp_orch.vocab.errors import InputError

FSDP_V2 = "SpmdFullyShardedDataParallel"
FSDP_V1 = "XlaFullyShardedDataParallel"
MESH_AXES = ("fsdp", "tensor")
CHECKPOINT_SPMD = "dcp+spmd-planners"
CHECKPOINT_PER_RANK = "dcp-per-rank-state"

_BOOL_SETTINGS = (
    "reshard_after_forward", "flatten_parameters", "execute_sharding_on_init",
    "optimization_barrier_in_forward", "optimization_barrier_in_backward", "sync_on_finalization",
    "disable_reshard_on_root", "fp32_reduce_scatter", "shard_param_on_dim_0",
    "pin_layout_in_collective_ops", "coalesce_all_gather_ops",
)
DTYPE_SETTINGS = ("compute_dtype", "buffer_dtype")
_INT_SETTINGS = ("reduce_scatter_bucket_size_mb",)
# Keyword arguments that fsdp-orch sets itself, or that cannot be written in YAML.
_NOT_SETTINGS = {
    "auto_wrap_policy": "set by fsdp-orch from fsdp.auto_wrap_policy",
    "auto_wrapper_callable": "set by fsdp-orch (fsdp.xla_fsdp_grad_ckpt wraps each layer in "
                             "checkpoint_module)",
    "param_init_fn": "a function; build the model in the factory passed to job.shard",
    "sharding_groups": "mixing FSDP with model parallelism is not planned by fsdp-orch",
    "sharding_rank": "mixing FSDP with model parallelism is not planned by fsdp-orch",
    "sharding_world_size": "mixing FSDP with model parallelism is not planned by fsdp-orch",
}
_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}
_MIXED_PRECISION = {"bf16": "bfloat16", "fp16": "float16"}
_RESHARD = {"FULL_SHARD": True, "SHARD_GRAD_OP": False}


@dataclass(frozen=True)
class XlaWrapPlan:
    """What :mod:`fsdp_orch.runtime.xla_fsdp` builds; kept on the job for logs and tests."""

    wrapper: str  # FSDP_V2 or FSDP_V1
    spmd: bool  # FSDPv2: xr.use_spmd(), one process per host, a gloo process group
    process_group: str  # the default group's backend: "gloo" (SPMD) or "xla"
    devices: int
    processes: int
    mesh_shape: tuple[int, ...] | None  # FSDPv2 only
    mesh_axis_names: tuple[str, ...] | None
    wrapper_kwargs: tuple[tuple[str, Any], ...]  # FSDP_V1's keyword arguments; dtypes by name
    auto_wrap_policy: str
    transformer_layer_cls_to_wrap: tuple[str, ...]  # empty: the model's _no_split_modules
    min_num_params: int | None  # SIZE_BASED_WRAP only
    grad_ckpt: bool  # checkpoint_module around each layer before it is wrapped
    broadcast_from_process_0: bool  # process 0's CPU weights copied to all before sharding
    checkpoint_method: str
    notes: tuple[str, ...] = ()

    def kwargs(self) -> dict[str, Any]:
        return dict(self.wrapper_kwargs)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_xla_wrap(options: FsdpOptions, devices: int, processes: int) -> XlaWrapPlan:
    """The plan for ``devices`` XLA devices in all and ``processes`` processes of the job.

    Raises InputError naming the ``fsdp.`` field when the options cannot be honoured on XLA.
    """
    if devices < 1 or processes < 1:
        raise ValueError("expected at least one device and one process, "
                         f"got {devices} and {processes}")
    v2 = options.xla_fsdp_v2
    _check_strategy(options, v2)
    if v2:
        _refuse_settings_under_v2(options)
        kwargs: dict[str, Any] = {}
    else:
        kwargs = v1_kwargs(options)
        if processes != devices:
            raise InputError(
                f"{FSDP_V1} runs one process per XLA device, but this job has {devices} devices "
                f"and {processes} processes: start the training function with torch_xla.launch on "
                "every worker, or use FSDPv2 (fsdp.xla_fsdp_v2: true)", field="fsdp.xla_fsdp_v2")
    if options.offload_params:
        raise InputError("XLA FSDP has no CPU offload; set it to false on a TPU",
                         field="fsdp.offload_params")
    size_based = options.auto_wrap_policy == "SIZE_BASED_WRAP"
    return XlaWrapPlan(
        wrapper=FSDP_V2 if v2 else FSDP_V1, spmd=v2, process_group="gloo" if v2 else "xla",
        devices=devices, processes=processes,
        mesh_shape=(devices, 1) if v2 else None, mesh_axis_names=MESH_AXES if v2 else None,
        wrapper_kwargs=tuple(sorted(kwargs.items())),
        auto_wrap_policy=options.auto_wrap_policy,
        transformer_layer_cls_to_wrap=tuple(options.transformer_layer_cls_to_wrap),
        min_num_params=options.min_num_params if size_based else None,
        grad_ckpt=options.xla_fsdp_grad_ckpt or options.activation_checkpointing,
        broadcast_from_process_0=options.sync_module_states and processes > 1,
        checkpoint_method=CHECKPOINT_SPMD if v2 else CHECKPOINT_PER_RANK,
        notes=tuple(_notes(options, v2)))


def v1_kwargs(options: FsdpOptions) -> dict[str, Any]:
    """XlaFullyShardedDataParallel's keyword arguments: ``xla_fsdp_settings`` checked and
    translated, plus what the general options imply (resharding, compute dtype)."""
    out: dict[str, Any] = {}
    for key, value in options.xla_fsdp_settings.items():
        out[key] = _setting(key, value)
    reshard = (options.reshard_after_forward if options.reshard_after_forward is not None
               else _RESHARD[options.sharding_strategy])
    # Defaults (FULL_SHARD, no mixed precision) yield to a setting; what the spec chose does not.
    # (Whether a field was written cannot be told: job.json carries every field.)
    source = ("fsdp.reshard_after_forward" if options.reshard_after_forward is not None
              else "fsdp.sharding_strategy" if options.sharding_strategy != "FULL_SHARD" else None)
    _agree(out, "reshard_after_forward", reshard, source)
    if options.mixed_precision in _MIXED_PRECISION:
        _agree(out, "compute_dtype", _MIXED_PRECISION[options.mixed_precision],
               "fsdp.mixed_precision")
    return out


def _setting(key: str, value: Any) -> Any:
    field = f"fsdp.xla_fsdp_settings.{key}"
    if key in _NOT_SETTINGS:
        raise InputError(f"not a setting: {_NOT_SETTINGS[key]}", field=field)
    if key in _BOOL_SETTINGS:
        if not isinstance(value, bool):
            raise InputError(f"expected true or false, got {value!r}", field=field)
        return value
    if key in DTYPE_SETTINGS:
        name = _DTYPES.get(value.strip().lower()) if isinstance(value, str) else None
        if name is None:
            raise InputError(f"expected a dtype name ({', '.join(sorted(set(_DTYPES.values())))}), "
                             f"got {value!r}", field=field)
        return name
    if key in _INT_SETTINGS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"expected a whole number >= 0, got {value!r}", field=field)
        return value
    known = [*_BOOL_SETTINGS, *DTYPE_SETTINGS, *_INT_SETTINGS]
    hint = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    raise InputError(f"unknown setting of {FSDP_V1}" + (f"; did you mean {hint[0]!r}?" if hint else
                     f"; known: {', '.join(sorted(known))}"), field=field)


def _agree(kwargs: dict[str, Any], key: str, implied: Any, source: str | None) -> None:
    """Set ``key`` to what the general option implies, unless the setting says otherwise; a setting
    that contradicts an option written in the spec (``source``) is refused."""
    if key not in kwargs:
        kwargs[key] = implied
    elif source is not None and kwargs[key] != implied:
        raise InputError(f"{kwargs[key]!r} contradicts {source} (which means {implied!r}); "
                         "remove one of them", field=f"fsdp.xla_fsdp_settings.{key}")


def _check_strategy(options: FsdpOptions, v2: bool) -> None:
    strategy = options.sharding_strategy
    if strategy not in _RESHARD:
        raise InputError(f"{strategy} has no XLA FSDP counterpart here; use FULL_SHARD "
                         "(or SHARD_GRAD_OP with fsdp.xla_fsdp_v2: false)",
                         field="fsdp.sharding_strategy")
    if v2 and (strategy == "SHARD_GRAD_OP" or options.reshard_after_forward is False):
        field = ("fsdp.sharding_strategy" if strategy == "SHARD_GRAD_OP"
                 else "fsdp.reshard_after_forward")
        raise InputError("FSDPv2 (SPMD) leaves when to gather parameters to the XLA compiler and "
                         "cannot keep them unsharded after forward; use FULL_SHARD, or "
                         "fsdp.xla_fsdp_v2: false", field=field)


def _refuse_settings_under_v2(options: FsdpOptions) -> None:
    if options.xla_fsdp_settings:
        key, value = next(iter(options.xla_fsdp_settings.items()))
        _setting(key, value)  # a typo or a bad value is named as such first
        raise InputError(f"a setting of {FSDP_V1}, which FSDPv2 (SPMD) does not take; set "
                         "fsdp.xla_fsdp_v2: false to use it, or remove it",
                         field=f"fsdp.xla_fsdp_settings.{key}")


def _notes(options: FsdpOptions, v2: bool) -> list[str]:
    notes = []
    if v2 and options.mixed_precision in _MIXED_PRECISION:
        notes.append(f"mixed_precision {options.mixed_precision}: FSDPv2 keeps the parameters' "
                     "dtype; compute in it with torch.autocast('xla', dtype=torch."
                     f"{_MIXED_PRECISION[options.mixed_precision]}) around the forward")
    if v2:
        notes.append("FSDPv2: shard each batch on the fsdp axis (xla_fsdp.shard_batch), else every "
                     "device computes the whole batch")
    if options.activation_checkpointing and not options.xla_fsdp_grad_ckpt:
        notes.append("activation_checkpointing on XLA: torch_xla's checkpoint_module around each "
                     "layer, as xla_fsdp_grad_ckpt")
    if options.forward_prefetch or options.backward_prefetch != "BACKWARD_PRE":
        notes.append("forward_prefetch / backward_prefetch ignored: on XLA the compiler schedules "
                     "the collectives")
    if options.cpu_ram_efficient_loading:
        notes.append("cpu_ram_efficient_loading ignored on XLA: "
                     "every process builds the model on CPU")
    if options.state_dict_type == "FULL_STATE_DICT":
        notes.append("FULL_STATE_DICT: the runtime writes sharded checkpoints only on XLA; no full "
                     "model at the end")
    return notes


__all__ = ["CHECKPOINT_PER_RANK", "CHECKPOINT_SPMD", "DTYPE_SETTINGS", "FSDP_V1", "FSDP_V2",
           "MESH_AXES", "XlaWrapPlan", "plan_xla_wrap", "v1_kwargs"]
