"""LoRA and QLoRA as they lay out memory, for the estimate (torch): PEFT's adapter shapes (A: r x
in, B: out x r, trainable, in the weights' dtype... as PEFT keeps them: float32), and for QLoRA the
base weight stored in 4 bits, packed into ``quant_storage`` elements (what bitsandbytes'
``Params4bit`` with ``bnb_4bit_quant_storage`` gives FSDP to shard), dequantized for each matmul and
again in the backward pass (bitsandbytes' ``MatMul4Bit`` saves only the packed weight).

The adapter's forward is PEFT's (``tuners/lora/layer.py`` and ``bnb.py``): its input cast to the
adapter's dtype, then dropped out with ``lora_dropout`` > 0, which keeps the dropped input (saved by
``lora_A``'s matmul) and its mask. Dropout is CUDA's fused kernel (``native_dropout``, a one-byte
mask); ``nn.Dropout`` on the CPU, where the estimate runs, keeps one in the input's dtype instead.
The adapter's output is multiplied by its scaling and added to the base output; for a 4-bit base,
as PEFT's ``bnb.py`` does, in place into a clone of it (``result = result.clone()``: "as per Tim
Dettmers, for 4bit, we need to defensively clone here")."""

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


class FusedDropout(nn.Dropout):
    """``nn.Dropout`` as it runs on a GPU: the fused kernel, whose backward keeps a bool mask."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return torch.native_dropout(x, self.p, True)[0]


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Module, in_features: int, out_features: int, r: int,
                 dtype: torch.dtype, dropout: float = 0.0):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(in_features, r, bias=False, dtype=dtype)
        self.lora_B = nn.Linear(r, out_features, bias=False, dtype=dtype)
        # PEFT's: nn.Dropout(p) when p > 0, else nn.Identity()
        self.dropout: nn.Module = FusedDropout(dropout) if dropout > 0 else nn.Identity()
        # PEFT's lora_alpha / r: its value moves no memory, its multiply makes a tensor
        self.scaling = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base(x)
        if isinstance(self.base, Packed4bit):
            result = result.clone()
            result += self._adapted(x, result.dtype)
            return result
        return result + self._adapted(x, result.dtype)

    def _adapted(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # one expression, as PEFT's: lora_B's output is freed once scaled, never held beside it
        return self.lora_B(self.lora_A(self.dropout(x.to(self.lora_A.weight.dtype)))).to(
            dtype) * self.scaling


def add_adapters(model: nn.Module, r: int, targets: str | list[str], quantize: str,
                 storage: torch.dtype, dropout: float = 0.0,
                 adapter_dtype: torch.dtype = torch.float32,
                 quantize_all: bool = False) -> dict[str, float]:
    """Freeze the model, wrap each target Linear in a LoRA adapter (its base packed in 4 bits with
    ``quantize == "nf4"``, its input dropped out with ``dropout`` > 0); with ``quantize_all``,
    every other Linear but the output head packed in 4 bits too. What was done: the Linear
    layers adapted, and the weights packed in 4 bits (``weights``)."""
    for p in model.parameters():
        p.requires_grad_(False)
    head = output_head(model)
    adapted, weights = 0, 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear) or child is head:
                continue
            wanted = targets == "all-linear" or name in targets
            if not wanted and not (quantize == "nf4" and quantize_all):
                continue
            base: nn.Module = child
            if quantize == "nf4":
                base = Packed4bit(child, storage)
                weights += child.in_features * child.out_features
            if not wanted:
                setattr(parent, name, base)
                continue
            setattr(parent, name, LoraLinear(base, child.in_features, child.out_features, r,
                                             adapter_dtype, dropout))
            adapted += 1
            if quantize != "nf4":
                weights += child.in_features * child.out_features
    return {"adapted": adapted, "weights": weights}


def output_head(model: nn.Module) -> nn.Module | None:
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    return head if isinstance(head, nn.Module) else None


__all__ = ["FusedDropout", "LoraLinear", "Packed4bit", "add_adapters", "output_head"]
