"""The ``fit:`` block of a job: what ``fsdp-orch fit`` needs beyond the job's FSDP options to
estimate each GPU's peak memory (the model, the batch and sequence length, the optimizer, LoRA)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from fsdp_orch.jobspec.limits import MAX_COUNT, MAX_LORA_RANK, MAX_SEQ_LEN, at_most
from fsdp_orch.jobspec.validation import StrictModel


class LoraOptions(StrictModel):
    r: Annotated[int, at_most(MAX_LORA_RANK)] = Field(default=8, gt=0)
    # PEFT's lora_dropout: the probability an adapter's input is zeroed with (LoraConfig's default:
    # 0.0, none); above 0 each adapted Linear keeps the dropped input and its mask for backward
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    # "all-linear" (PEFT's: every nn.Linear but the output head), or the Linear modules' names
    target_modules: Literal["all-linear"] | list[str] = "all-linear"
    # nf4: QLoRA, the base weights stored in 4 bits (bitsandbytes), packed into
    # ``quant_storage`` elements so that FSDP can shard them
    quantize: Literal["no", "nf4"] = "no"
    quant_storage: Literal["bfloat16", "float16", "float32", "uint8"] = "bfloat16"
    double_quant: bool = True

    @field_validator("target_modules", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        if isinstance(value, str) and value != "all-linear":
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


class FitOptions(StrictModel):
    # a Hugging Face config: a config.json, or a model folder that holds one (never the hub); or a
    # Python factory "package.module:function" that returns the torch module
    model: str = Field(min_length=1)
    # per GPU, one micro-batch
    batch_size: Annotated[int, at_most(MAX_COUNT)] = Field(default=1, gt=0)
    seq_len: Annotated[int, at_most(MAX_SEQ_LEN)] = Field(default=2048, gt=0)
    optimizer: Literal["adamw", "adam", "sgd"] = "adamw"
    # the weights' dtype as the script loads them (torch_dtype)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # attention without the score matrix in memory (flash-attention 2, SDPA's flash kernel)
    flash_attention: bool = True
    lora: LoraOptions | None = None


__all__ = ["FitOptions", "LoraOptions"]
