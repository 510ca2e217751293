"""LoRA and QLoRA as they lay out memory, for the estimate (torch): PEFT's adapter shapes (A: r x
in, B: out x r, trainable, in the weights' dtype... as PEFT keeps them: float32), and for QLoRA the
base weight stored in 4 bits, packed into ``quant_storage`` elements (what bitsandbytes'
``Params4bit`` with ``bnb_4bit_quant_storage`` gives FSDP to shard), dequantized for each matmul and
again in the backward pass (bitsandbytes' ``MatMul4Bit`` saves only the packed weight)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class _Dequantized(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, packed: torch.Tensor, out_features: int,
                in_features: int) -> torch.Tensor:
        ctx.save_for_backward(packed)
        ctx.shape = (out_features, in_features)
        weight = torch.empty(out_features, in_features, dtype=x.dtype, device=x.device)
        return x @ weight.t()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (packed,) = ctx.saved_tensors
        weight = torch.empty(*ctx.shape, dtype=grad.dtype, device=grad.device)
        return grad @ weight, None, None, None


class Packed4bit(nn.Module):
    """A frozen Linear whose weight is 4 bits a value, packed into ``storage`` elements."""

    def __init__(self, base: nn.Linear, storage: torch.dtype):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        per_element = torch.finfo(storage).bits // 4 if storage.is_floating_point else 2
        numel = -(-base.in_features * base.out_features // per_element)
        self.packed = nn.Parameter(torch.empty(numel, 1, dtype=storage), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Dequantized.apply(x, self.packed, self.out_features, self.in_features)


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Module, in_features: int, out_features: int, r: int,
                 dtype: torch.dtype):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(in_features, r, bias=False, dtype=dtype)
        self.lora_B = nn.Linear(r, out_features, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_B(self.lora_A(x.to(self.lora_A.weight.dtype))).to(x.dtype)


def add_adapters(model: nn.Module, r: int, targets: str | list[str], quantize: str,
                 storage: torch.dtype) -> dict[str, float]:
    """Freeze the model, wrap each target Linear in a LoRA adapter (its base packed in 4 bits with
    ``quantize == "nf4"``); what was done: the Linear layers adapted and their weights."""
    for p in model.parameters():
        p.requires_grad_(False)
    head = _output_head(model)
    adapted, weights = 0, 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear) or child is head:
                continue
            if targets != "all-linear" and name not in targets:
                continue
            base: nn.Module = child
            if quantize == "nf4":
                base = Packed4bit(child, storage)
            setattr(parent, name, LoraLinear(base, child.in_features, child.out_features, r,
                                             torch.float32))
            adapted += 1
            weights += child.in_features * child.out_features
    return {"adapted": adapted, "weights": weights}


def _output_head(model: nn.Module) -> nn.Module | None:
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    return head if isinstance(head, nn.Module) else None


__all__ = ["LoraLinear", "Packed4bit", "add_adapters"]
