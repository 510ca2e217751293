"""The job spec's ``fsdp:`` options: accelerate's FSDP settings under accelerate's names (its
``fsdp_`` prefixed forms and numeric sharding strategies accepted too)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from fsdp_orch.jobspec.field_types import upper_enum
from fsdp_orch.jobspec.validation import StrictModel

# accelerate's numeric sharding strategies (FullyShardedDataParallelPlugin).
SHARDING_BY_NUMBER = {1: "FULL_SHARD", 2: "SHARD_GRAD_OP", 3: "NO_SHARD", 4: "HYBRID_SHARD",
                      5: "HYBRID_SHARD_ZERO2"}


def fsdp_name(key: str) -> str:
    """The spec's name for an FSDP option written the accelerate way: ``fsdp_`` prefix off,
    accelerate's older ``backward_prefetch_policy`` renamed."""
    name = key[len("fsdp_"):] if key.startswith("fsdp_") else key
    return "backward_prefetch" if name == "backward_prefetch_policy" else name


class FsdpOptions(StrictModel):
    """accelerate's FSDP options under accelerate's names
    (``fsdp_`` prefixed forms accepted too)."""

    sharding_strategy: Annotated[
        Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"],
        BeforeValidator(lambda v: SHARDING_BY_NUMBER.get(v, v) if isinstance(v, int)
                        and not isinstance(v, bool) else upper_enum(v)),
    ] = "FULL_SHARD"
    reshard_after_forward: bool | None = None
    auto_wrap_policy: Annotated[
        Literal["TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"],
        BeforeValidator(upper_enum)
    ] = "TRANSFORMER_BASED_WRAP"
    transformer_layer_cls_to_wrap: list[str] = Field(default_factory=list)
    min_num_params: int = Field(default=100_000_000, gt=0)
    offload_params: bool = False
    mixed_precision: Annotated[
        Literal["bf16", "fp16", "no"],
        BeforeValidator(lambda v: "no" if v is False or v is None else
                        (v.strip().lower() if isinstance(v, str) else v)),
    ] = "no"
    state_dict_type: Annotated[
        Literal["SHARDED_STATE_DICT", "FULL_STATE_DICT"], BeforeValidator(upper_enum)
    ] = "SHARDED_STATE_DICT"
    backward_prefetch: Annotated[
        Literal["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"], BeforeValidator(upper_enum)
    ] = "BACKWARD_PRE"
    forward_prefetch: bool = False
    cpu_ram_efficient_loading: bool = False
    sync_module_states: bool = True
    use_orig_params: bool = True
    activation_checkpointing: bool = False
    version: Literal[1, 2] = 2
    xla: bool = False
    xla_fsdp_settings: dict[str, Any] = Field(default_factory=dict)
    xla_fsdp_grad_ckpt: bool = False
    # On an XLA device: FSDPv2 through SPMD when true, XlaFullyShardedDataParallel when false
    # (Hugging Face's fsdp_config name; false by default there). See fsdp_orch.runtime.xla_plan.
    xla_fsdp_v2: bool = True

    accepted_aliases: ClassVar[tuple[str, ...]] = ("backward_prefetch_policy",)

    @model_validator(mode="before")
    @classmethod
    def _accept_accelerate_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out: dict[str, Any] = {}
        for key, value in data.items():
            name = fsdp_name(key) if isinstance(key, str) else key
            if name in out:
                raise ValueError(f"{key!r} given twice (with and without the fsdp_ prefix)")
            out[name] = value
        return out

    @field_validator("xla_fsdp_settings")
    @classmethod
    def _json_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        import json

        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError("expected plain YAML values (strings, numbers, "
                             f"lists, mappings): {exc}") from None
        return value

    @field_validator("transformer_layer_cls_to_wrap", mode="before")
    @classmethod
    def _split_classes(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value
