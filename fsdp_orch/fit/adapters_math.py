"""QLoRA's memory outside the tensors FSDP shards (pure): bitsandbytes' nf4 quantization constants
(``quant_state``), kept whole on every rank."""

from __future__ import annotations

# one float32 absmax a block of 64 weights; with double quantization, 8 bits a block and one
# float32 a group of 256 blocks
BLOCK = 64
DOUBLE_QUANT_GROUP = 256


def quant_state_bytes(weights: float, double_quant: bool) -> float:
    blocks = weights / BLOCK
    return blocks + blocks / DOUBLE_QUANT_GROUP * 4 if double_quant else blocks * 4


__all__ = ["quant_state_bytes"]
