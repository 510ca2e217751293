"""The training step as the recipe runs it (torch), for the estimate: its optimizer (AdamW, Adam,
SGD, or bitsandbytes' 8-bit AdamW as it lays out its state), stepped after the backward pass or
inside it (torchtune's ``optimizer_in_bwd``); the loss over the whole logits (Hugging Face's) or
in chunks (torchtune's ``CEWithChunkedOutputLoss``); saved activations offloaded to host memory
(torchtune's ``OffloadActivations``) or kept."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from fsdp_orch.fit.setup import FitSetup

EIGHT_BIT_BLOCK = 256  # bitsandbytes' blockwise optimizer: one float32 absmax a block
EIGHT_BIT_MIN_SIZE = 4096  # bitsandbytes' min_8bit_size: smaller tensors keep float32 state
OFFLOAD_MIN_BYTES = 1024  # torchtune's OffloadActivations min_offload_size


class EightBitAdamW(torch.optim.Optimizer):
    """bitsandbytes' ``AdamW8bit`` as it holds memory: two uint8 states a value and a float32
    absmax a block of 256 (float32 states for tensors under 4096 values); its fused kernel steps
    in place, with no temporaries."""

    def __init__(self, params: Any, lr: float = 1e-4):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(_eight_bit_state(p))
                p.add_(p.grad, alpha=-group["lr"])


def _eight_bit_state(p: torch.Tensor) -> dict[str, torch.Tensor]:
    local = p.to_local() if hasattr(p, "to_local") else p
    if local.numel() < EIGHT_BIT_MIN_SIZE:
        return {"state1": torch.zeros_like(local, dtype=torch.float32),
                "state2": torch.zeros_like(local, dtype=torch.float32)}
    blocks = -(-local.numel() // EIGHT_BIT_BLOCK)
    return {"state1": torch.zeros(local.numel(), dtype=torch.uint8, device=local.device),
            "state2": torch.zeros(local.numel(), dtype=torch.uint8, device=local.device),
            "absmax1": torch.zeros(blocks, dtype=torch.float32, device=local.device),
            "absmax2": torch.zeros(blocks, dtype=torch.float32, device=local.device)}


def optimizer_for(kind: str, params: list[Any]) -> Any:
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    if kind in ("adamw8bit", "paged_adamw8bit"):
        return EightBitAdamW(params)
    return (torch.optim.Adam if kind == "adam" else torch.optim.AdamW)(params, lr=1e-4)


def first_step_state(trainable: list[Any], optimizer: Any) -> None:
    """The optimizer's state as after a first step (the tracker counts it from its start)."""
    for p in trainable:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@contextlib.contextmanager
def stepped_in_backward(trainable: list[Any], optimizer: Any) -> Iterator[None]:
    """Each parameter stepped as soon as its gradient is made, and the gradient freed: the
    optimizer steps only the parameters that have one (FSDP2 calls these hooks after its
    reduce-scatter)."""
    def step(p: Any) -> None:
        optimizer.step()
        p.grad = None

    handles = [p.register_post_accumulate_grad_hook(step) for p in trainable]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def offloaded_activations() -> Iterator[None]:
    """Every saved activation of 1 KiB or more leaves the device in the forward pass and comes
    back for the backward, one at a time: what is kept is its shape, and a fresh tensor stands
    for it when the backward unpacks it (its values are never read for memory)."""
    def pack(t: torch.Tensor) -> Any:
        if isinstance(t, nn.Parameter) or t.numel() * t.element_size() < OFFLOAD_MIN_BYTES:
            return t
        return (tuple(t.shape), t.dtype, t.device)

    def unpack(packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        shape, dtype, device = packed
        return torch.empty(shape, dtype=dtype, device=device)

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield


class ChunkedHead(nn.Module):
    """The output projection applied to ``chunks`` pieces of the sequence, each kept in the
    model's dtype (torchtune's ``num_output_chunks``): the logits are a list."""

    def __init__(self, head: nn.Module, chunks: int):
        super().__init__()
        self.head, self.chunks = head, chunks

    def forward(self, hidden: torch.Tensor) -> list[torch.Tensor]:
        return [self.head(piece) for piece in hidden.chunk(self.chunks, dim=1)]


def chunk_the_head(model: Any, chunks: int) -> bool:
    """Swap a Hugging Face model's output head for ``ChunkedHead``; False where it has none."""
    from fsdp_orch.fit.adapters import output_head

    head = output_head(model)
    for parent in model.modules():
        for name, child in parent.named_children():
            if child is head and head is not None:
                setattr(parent, name, ChunkedHead(head, chunks))
                return True
    return False


def run_step(model: Any, ids: Any, optimizer: Any, setup: FitSetup, trainable: list[Any]) -> None:
    fit = setup.fit
    offload = offloaded_activations() if fit.activation_offload else contextlib.nullcontext()
    stepped = fit.optimizer_in_backward and setup.fsdp_version == 2
    in_backward = (stepped_in_backward(trainable, optimizer) if stepped
                   else contextlib.nullcontext())
    hf = hasattr(model, "config") or hasattr(getattr(model, "module", None), "config")
    with in_backward:
        with offload:
            if not hf:
                out = model(ids)
            elif fit.loss == "chunked":
                out = model(input_ids=ids)
            else:
                out = model(input_ids=ids, labels=ids)
        loss = _loss(out, ids, hf and fit.loss == "chunked")
        loss.backward()
    if not stepped:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _loss(out: Any, ids: Any, chunked: bool) -> Any:
    """The step's loss: a Hugging Face model's own; a factory's logits (batch, tokens, vocab)
    against the tokens in float32, as language-model loops compute it (its log-softmax and their
    gradient, two float32 copies of the logits, were 1 GiB of the demo's 4.97 GiB peak on an H200,
    which a mean of the output left out); any other output's mean."""
    if not chunked:
        if hasattr(out, "loss") and out.loss is not None:
            return out.loss
        if _token_logits(out, ids):
            return nn.functional.cross_entropy(out.float().flatten(0, 1), ids.flatten())
        return out.float().mean()
    logits = out.logits
    if not isinstance(logits, list):
        logits = [logits]
    labels = ids.chunk(len(logits), dim=1)
    total = sum(nn.functional.cross_entropy(piece.float().flatten(0, 1), target.flatten(),
                                            reduction="sum")
                for piece, target in zip(logits, labels, strict=True))
    return total / ids.numel()


def _token_logits(out: Any, ids: Any) -> bool:
    """``out`` holds a score for each token of ``ids`` over two classes or more."""
    return (isinstance(out, torch.Tensor) and out.is_floating_point() and out.dim() == 3
            and tuple(out.shape[:2]) == tuple(ids.shape) and out.shape[-1] >= 2)


__all__ = ["ChunkedHead", "EightBitAdamW", "chunk_the_head", "first_step_state",
           "offloaded_activations", "optimizer_for", "run_step", "stepped_in_backward"]
