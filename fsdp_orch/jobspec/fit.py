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
    # the adapters' own dtype: PEFT keeps them in float32; torchtune builds them in the model's
    adapter_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # which frozen Linear layers quantize packs in 4 bits: the adapted ones (PEFT's), or every
    # Linear but the output head (bitsandbytes' load_in_4bit, torchtune's QLoRA builders)
    quantize_modules: Literal["adapted", "all-linear"] = "adapted"
    # the 4-bit weights' quantization constants: kept whole on every rank (bitsandbytes'
    # quant_state), or sharded with their weights (torchao's NF4Tensor, torchtune's QLoRA)
    quant_constants: Literal["whole", "sharded"] = "whole"

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
    # adamw8bit and paged_adamw8bit: bitsandbytes' (state in 8 bits, blockwise constants);
    # paged_adamw: its state in unified memory, on the GPU as adamw's
    optimizer: Literal["adamw", "adam", "sgd", "adamw8bit", "paged_adamw8bit",
                       "paged_adamw"] = "adamw"
    # the weights' dtype as the script loads them (torch_dtype)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # attention without the score matrix in memory (flash-attention 2, SDPA's flash kernel)
    flash_attention: bool = True
    lora: LoraOptions | None = None
    # the recipe's knobs beyond the job's fsdp: block (docs/guides/fit.md, "Recipes")
    # "job": as fsdp.activation_checkpointing says (full, or none); "selective-layer": every
    # checkpoint_every-th layer (torchtitan's selective_ac_option: N); "selective-op":
    # torchtitan's op policy (the matmuls' outputs saved every other one, attention's kept)
    activation_checkpointing: Literal["job", "none", "full", "selective-op",
                                      "selective-layer"] = "job"
    checkpoint_every: int = Field(default=2, gt=0, le=1000)
    # saved activations moved to host memory between forward and backward (torchtune's
    # enable_activation_offloading)
    activation_offload: bool = False
    # the gradients' reduce dtype under mixed precision: "param" (FSDP's default) or float32
    # (torchtitan's mixed_precision_reduce)
    reduce_dtype: Literal["param", "float32"] = "param"
    # the loss over the whole logits upcast to float32 (Hugging Face's), or in chunks of the
    # sequence (torchtune's CEWithChunkedOutputLoss, loss_chunks of them)
    loss: Literal["full", "chunked"] = "full"
    loss_chunks: int = Field(default=8, gt=0, le=1024)
    # rows packed to seq_len tokens (every row full); without packing seq_len is the longest row
    packed: bool = False
    # the optimizer's state alone in host memory (torchao's CPUOffloadOptimizer)
    optimizer_offload: bool = False
    # each parameter stepped as its gradient is made, the gradient freed at once (torchtune's
    # optimizer_in_bwd)
    optimizer_in_backward: bool = False
    # modules wrapped in a fully_shard of their own beside the layers, by name
    # (torchtune's custom_sharded_layers: [tok_embeddings, output]; HF: embed_tokens, lm_head)
    shard_apart: tuple[str, ...] = ()
    # torch.compile: accepted, and named in the output as not modelled (the estimate is eager)
    compile: bool = False


__all__ = ["FitOptions", "LoraOptions"]
