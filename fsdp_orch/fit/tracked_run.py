"""The estimate's measured part (torch): the job's model built under ``FakeTensorMode``, sharded
with ``fully_shard`` for every rank of the job over a fake process group (``FakeStore``) in this
one CPU process, then a forward, backward and optimizer step under ``FSDPMemTracker`` (the
optimizer's state made beforehand, as after the first step). What one rank holds at its peak, by
the tracker's categories. Nothing is allocated: the tensors are fake. The step itself
(``tracked_step``) is shared with ``real_run``, which runs it on real tensors over torchrun's ranks
to check the estimate on small models (``tests/integration/test_fit_real.py``,
``bench/fit_real.py``).

A Hugging Face model deeper than ``EXTRAPOLATE_FROM[1]`` layers is measured at two depths and each
figure carried linearly to the model's own: every layer adds the same shards, gradients, optimizer
state and saved activations, and once the model is a few layers deep the peak falls at the same
point of the step, so each category is a + b x layers there. At 2 and 4 layers it did not yet (a
16-layer model carried from them was 5% high, its all-gather buffers 3x); from 4 and 8 every
category matched the 16 layers measured whole. A 70B model's 80 layers took 218 s of CPU
(FakeTensorMode's dispatch, 2 steps); 4 and 8 layers take a tenth of that.
``tests/integration/test_fit.py`` holds the carried figures to the full depth's.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any

from fsdp_orch.fit.setup import FitSetup

DTYPES = ("float32", "bfloat16", "float16")
EXTRAPOLATE_FROM = (4, 8)
COUNTS = ("params", "trainable", "adapted", "weights")


def measure(setup: FitSetup, base: str, *, whole: bool = False) -> dict[str, Any]:
    """{"peak": {category: bytes}, "params", "trainable", "adapted", "weights", "seconds",
    "layers": {"model": L, "measured": [..]}} for one rank (rank 0; FSDP gives every rank the same
    shapes, give or take one element). ``whole``: measure every layer, never carry."""
    from fsdp_orch.fit import model_source

    began = time.monotonic()
    depth = model_source.layer_count(setup.fit.model, base)
    low, high = EXTRAPOLATE_FROM
    if whole or depth is None or depth <= high:
        result = _measure_once(setup, base, None)
        result["layers"] = {"model": depth, "measured": [depth]}
    else:
        at_low, at_high = _measure_once(setup, base, low), _measure_once(setup, base, high)
        result = {"peak": {k: _carry(at_low["peak"].get(k, 0), v, depth)
                           for k, v in at_high["peak"].items()},
                  **{k: _carry(at_low[k], at_high[k], depth) for k in COUNTS},
                  "layers": {"model": depth, "measured": [low, high]}}
    result["seconds"] = round(time.monotonic() - began, 1)
    return result


def _carry(at_low: float, at_high: float, depth: int) -> int:
    low, high = EXTRAPOLATE_FROM
    return round(at_low + (at_high - at_low) / (high - low) * (depth - low))


def _measure_once(setup: FitSetup, base: str, layers: int | None) -> dict[str, Any]:
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=setup.world_size)
    try:
        return tracked_step(setup, base, layers=layers, tensor_mode=FakeTensorMode())
    finally:
        dist.destroy_process_group()


def tracked_step(setup: FitSetup, base: str, *, layers: int | None = None,
                 tensor_mode: Any = None) -> dict[str, Any]:
    """The job's model built, adapted, sharded over the default process group (``measure``'s fake
    one, or ``real_run``'s under torchrun), its optimizer state made, and one step under
    ``FSDPMemTracker``: this rank's peak by category, and the model's counts. ``tensor_mode``:
    ``FakeTensorMode()`` for the estimate, None for real tensors."""
    import torch
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh

    from fsdp_orch.fit import model_source

    fit = setup.fit
    mesh = init_device_mesh("cpu", setup.mesh_shape)
    with tensor_mode or contextlib.nullcontext():
        model = model_source.build(fit.model, base, getattr(torch, fit.dtype),
                                   fit.flash_attention, layers=layers)
        params = sum(p.numel() for p in model.parameters())
        adapted: dict[str, float] = {"adapted": 0, "weights": 0}
        if fit.lora is not None:
            from fsdp_orch.fit.adapters import add_adapters

            adapted = add_adapters(model, fit.lora.r, fit.lora.target_modules,
                                   fit.lora.quantize, getattr(torch, fit.lora.quant_storage),
                                   fit.lora.dropout)
        _shard(model, setup, mesh)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = _optimizer(fit.optimizer, trainable)
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 2)
        ids = torch.randint(0, vocab, (fit.batch_size, fit.seq_len))
        _first_step_state(trainable, optimizer)
        tracker = FSDPMemTracker(model, optimizer)
        tracker.track_inputs((ids,))
        with tracker, _one_sequence_a_row():
            _step(model, ids, optimizer)
        peak = tracker.get_tracker_snapshot("peak")
    [by_category] = peak.values() if len(peak) == 1 else [peak.get(torch.device("cpu"), {})]
    return {"peak": {_name(k): int(v) for k, v in by_category.items()},
            "params": params, "trainable": sum(p.numel() for p in trainable), **adapted}


@contextlib.contextmanager
def _one_sequence_a_row() -> Iterator[None]:
    """Hugging Face's attention masks as a real step without padding has them: none, SDPA's and
    flash attention's own causal masking. transformers takes fake tensors for a graph being traced,
    where it cannot read whether a row packs several sequences, and so builds a (batch, 1, seq, seq)
    mask that a real step never holds, and SDPA saves a float copy of it in every layer (the tiny
    Llama at 2 x 64 tokens: 8 KiB, then 32 KiB a layer, all of what its estimate had above its real
    run). Every row is one sequence here (the step's ids are unpadded and unpacked)."""
    masking = sys.modules.get("transformers.masking_utils")
    found = getattr(masking, "find_packed_sequence_indices", None)
    if found is None:
        yield
        return
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = found


def _first_step_state(trainable: list[Any], optimizer: Any) -> None:
    """The optimizer's state as after a first step (the tracker counts it from its start)."""
    import torch

    for p in trainable:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _name(category: Any) -> str:
    """The tracker's category (a str enum: SHARDED_PARAM, ..., or the key "Total"), lower case."""
    return str(getattr(category, "name", category)).lower()


def _layers(model: Any, setup: FitSetup) -> list[tuple[Any, str, Any]]:
    """(parent, name, module) of each module wrapped in its own ``fully_shard``."""
    if setup.wrap == "NO_WRAP":
        return []
    wanted = set(setup.layer_classes) or set(getattr(model, "_no_split_modules", None) or ())
    found = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child).__name__ in wanted:
                found.append((parent, name, child))
    return found


def _shard(model: Any, setup: FitSetup, mesh: Any) -> None:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy()
    if setup.mixed_precision != "no":
        low = torch.bfloat16 if setup.mixed_precision == "bf16" else torch.float16
        policy = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=low)
    options = {"mesh": mesh, "reshard_after_forward": setup.reshard_after_forward,
               "mp_policy": policy}
    for parent, name, layer in _layers(model, setup):
        if setup.activation_checkpointing:
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
                CheckpointImpl,
                checkpoint_wrapper,
            )

            layer = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
            setattr(parent, name, layer)
        fully_shard(layer, **options)
    fully_shard(model, **options)


def _optimizer(kind: str, params: list[Any]) -> Any:
    import torch

    if kind == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    return (torch.optim.AdamW if kind == "adamw" else torch.optim.Adam)(params, lr=1e-4)


def _step(model: Any, ids: Any, optimizer: Any) -> None:
    out = model(input_ids=ids, labels=ids) if hasattr(model, "config") else model(ids)
    loss = out.loss if hasattr(out, "loss") else out.float().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


__all__ = ["DTYPES", "measure", "tracked_step"]
