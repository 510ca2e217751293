"""The estimate's measured part (torch): the job's model built under ``FakeTensorMode``, sharded
with ``fully_shard`` for every rank of the job over a fake process group (``FakeStore``) in this
one CPU process, then a forward, backward and optimizer step under ``FSDPMemTracker`` (the
optimizer's state made beforehand, as after the first step). What one rank holds at its peak, by
the tracker's categories. Nothing is allocated: the tensors are fake. The step itself
(``tracked_step``) is shared with ``real_run``, which runs it on real tensors over torchrun's ranks
to check the estimate on small models (``tests/integration/test_fit_real.py``,
``bench/fit_real.py``).

A Hugging Face model deeper than ``DEPTHS[-1]`` layers is measured at three depths and each figure
carried linearly from the last two to the model's own: every layer adds the same shards,
gradients, optimizer state and saved activations, and once the peak falls at the same point of
the step each category is a + b x layers there. The first depth checks that it does: off the line
through the other two by more than 1%, the answer says it is a lower bound (``_carried``). At 2
and 4 layers the peak had not settled (a 16-layer model carried from them was 5% high); from 4
and 8 every category matched 16 layers measured whole. ``tests/integration/test_fit.py`` holds
the carried figures to the full depth's.
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

from fsdp_orch.fit.setup import FitSetup

DTYPES = ("float32", "bfloat16", "float16")
DEPTHS = (4, 8, 12)  # carried from the last two; the first says whether the line holds
ON_THE_LINE = 0.01
COUNTS = ("params", "trainable", "adapted", "weights", "sharded_bytes")


def measure(setup: FitSetup, base: str, *, whole: bool = False) -> dict[str, Any]:
    """{"peak": {category: bytes}, "params", "trainable", "adapted", "weights", "seconds",
    "layers": {"model": L, "measured": [..], ("bound": why)}} for one rank (rank 0; FSDP gives
    every rank the same shapes, give or take one element). ``whole``: measure every layer, never
    carry."""
    from fsdp_orch.fit import model_source

    began = time.monotonic()
    depth = model_source.layer_count(setup.fit.model, base)
    if whole or depth is None or depth <= DEPTHS[-1]:
        result = _measure_once(setup, base, None)
        result["layers"] = {"model": depth, "measured": [depth]}
    else:
        result = _carried(setup, base, depth)
    result["seconds"] = round(time.monotonic() - began, 1)
    return result


def _carried(setup: FitSetup, base: str, depth: int) -> dict[str, Any]:
    """Measured at ``DEPTHS`` and carried from the last two. Where the first is off the line
    through the other two, the peak fell at another point of the step as layers were added, and
    may move again deeper: the carried figure is then a lower bound (the peak over the step's
    points is the largest of lines in the depth, so it bends up, never down), and said so."""
    first, low, high = DEPTHS
    runs = {d: _measure_once(setup, base, d) for d in DEPTHS}
    result: dict[str, Any] = {
        "peak": {k: _carry(runs[low]["peak"].get(k, 0), v, low, high, depth)
                 for k, v in runs[high]["peak"].items()},
        **{k: _carry(runs[low][k], runs[high][k], low, high, depth)
           for k in COUNTS if k in runs[high]},
        "layers": {"model": depth, "measured": list(DEPTHS)}}
    totals = [runs[d]["peak"].get("total", 0) for d in DEPTHS]
    on_line = _carry(totals[1], totals[2], low, high, first)
    off = (totals[0] - on_line) / max(on_line, 1)
    if abs(off) > ON_THE_LINE:
        result["layers"]["bound"] = (
            f"carried from {low} and {high} layers to {depth}: a lower bound, not exact (the "
            f"peak moved to another point of the step between {first} and {high} layers: "
            f"{first} layers' is {off:+.1%} off the line through {low} and {high}); fsdp-orch fit "
            f"--every-layer measures all {depth}")
    return result


def _carry(at_low: float, at_high: float, low: int, high: int, depth: int) -> int:
    return round(at_low + (at_high - at_low) / (high - low) * (depth - low))


def _measure_once(setup: FitSetup, base: str, layers: int | None) -> dict[str, Any]:
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=setup.world_size)
    try:
        with warnings.catch_warnings():  # FSDP1 reads data pointers, which fake tensors lack
            warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
            return tracked_step(setup, base, layers=layers, tensor_mode=FakeTensorMode())
    finally:
        dist.destroy_process_group()


def tracked_step(setup: FitSetup, base: str, *, layers: int | None = None,
                 tensor_mode: Any = None) -> dict[str, Any]:
    """The job's model built, adapted, sharded over the default process group (``measure``'s fake
    one, or ``real_run``'s under torchrun), its optimizer state made, and one step under
    ``FSDPMemTracker`` (FSDP2) or ``MemTracker`` (FSDP1's flat parameters): this rank's peak by
    category, and the model's counts. ``tensor_mode``: ``FakeTensorMode()`` for the estimate,
    None for real tensors."""
    import torch

    from fsdp_orch.fit import model_source, recipe, sharding

    fit = setup.fit
    mesh = sharding.mesh_for(setup)
    with tensor_mode or contextlib.nullcontext():
        model = model_source.build(fit.model, base, getattr(torch, fit.dtype),
                                   fit.flash_attention, layers=layers, argv=setup.argv)
        params = sum(p.numel() for p in model.parameters())
        adapted: dict[str, float] = {"adapted": 0, "weights": 0}
        if fit.lora is not None:
            from fsdp_orch.fit.adapters import add_adapters

            lora = fit.lora
            adapted = add_adapters(model, lora.r, lora.target_modules, lora.quantize,
                                   getattr(torch, lora.quant_storage), lora.dropout,
                                   getattr(torch, lora.adapter_dtype),
                                   lora.quantize_modules == "all-linear")
        if fit.loss == "chunked":
            recipe.chunk_the_head(model, fit.loss_chunks)
        trains = sum(p.numel() for p in model.parameters() if p.requires_grad)  # FSDP1 flattens
        model = sharding.shard(model, setup, mesh)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = recipe.optimizer_for(fit.optimizer, trainable)
        vocab = int(getattr(_config(model), "vocab_size", 0) or 2)
        ids = torch.randint(0, vocab, (fit.batch_size, fit.seq_len))
        recipe.first_step_state(trainable, optimizer)
        tracker = _tracker(model, optimizer, setup, ids)
        with tracker, _one_sequence_a_row(), _storage_tells_allocation():
            recipe.run_step(model, ids, optimizer, setup, trainable)
        peak = _peak(tracker, setup.fsdp_version == 1)
        sharded = {"sharded_bytes": _sharded_bytes(model)} if setup.fsdp_version == 1 else {}
    return {"peak": peak, "params": params, "trainable": trains, **adapted, **sharded}


@contextlib.contextmanager
def _storage_tells_allocation() -> Iterator[None]:
    """FSDP1 asks whether a flat parameter is allocated by its data pointer, which a fake tensor
    does not have (0): its storage's size says the same for real and fake tensors alike."""
    from torch.distributed.fsdp import _flat_param

    asked = _flat_param._data_ptr_allocated
    _flat_param._data_ptr_allocated = lambda tensor: tensor.untyped_storage().size() > 0
    try:
        yield
    finally:
        _flat_param._data_ptr_allocated = asked


def _config(model: Any) -> Any:
    inner = getattr(model, "module", None)
    return getattr(model, "config", None) or getattr(inner, "config", None)


def _tracker(model: Any, optimizer: Any, setup: FitSetup, ids: Any) -> Any:
    if setup.fsdp_version == 1:
        tracker = _flat_parameter_tracker()
        tracker.track_external(model, optimizer)
        return tracker
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    tracker = FSDPMemTracker(model, optimizer)
    tracker.track_inputs((ids,))
    return tracker


def _flat_parameter_tracker() -> Any:
    """``MemTracker`` for FSDP1. With ``use_orig_params`` its parameters are views into the flat
    parameter (not leaves, so no post-accumulate hook): their gradients are then counted where
    they are made (as temporaries), and the total is the same."""
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY as TOTAL
    from torch.distributed._tools.mem_tracker import MemTracker

    class FlatParameterTracker(MemTracker):
        def _track_module_params_and_buffers(self, module: Any,
                                             install_grad_hooks: bool = True) -> Any:
            leaves = all(p.is_leaf and p.requires_grad for p in module.parameters())
            return super()._track_module_params_and_buffers(
                module, install_grad_hooks=install_grad_hooks and leaves)

        def _update_peak_stats(self, peak_state: Any) -> None:
            # the step's peak only: MemTracker's own also keeps each module's, walking every
            # module at every op (two thirds of a 7B model's measurement)
            for device, snapshot in self._curr_mem_snap.items():
                if self._peak_mem.get(device, 0) < snapshot[TOTAL]:
                    self._peak_mem[device] = snapshot[TOTAL]
                    self._peak_mem_snap[device] = dict(snapshot)

    return FlatParameterTracker()


# MemTracker's categories (FSDP1) as FSDPMemTracker's, but its parameters: "param", the flat
# parameters held at the peak, sharded and gathered together (which of them is which at the peak
# is not told apart; the sharded ones' size is counted from the shapes: "sharded_bytes")
FSDP1_CATEGORIES = {"param": "param", "grad": "sharded_grad", "act": "act", "temp": "temp",
                    "opt": "opt", "buffer": "buffer", "oth": "temp", "total": "total"}


def _peak(tracker: Any, flat: bool) -> dict[str, int]:
    import torch

    snapshot = tracker.get_tracker_snapshot("peak")
    [by_category] = (snapshot.values() if len(snapshot) == 1
                     else [snapshot.get(torch.device("cpu"), {})])
    out: dict[str, int] = {}
    for category, count in by_category.items():
        name = _name(category)
        key = FSDP1_CATEGORIES.get(name, name) if flat else name
        out[key] = out.get(key, 0) + int(count)
    return out


def _sharded_bytes(model: Any) -> int:
    """FSDP1: the flat parameters' shards on this rank, padded (what offload moves to host)."""
    flat = {id(m._handle.flat_param): m._handle.flat_param for m in model.modules()
            if getattr(m, "_handle", None) is not None}  # an FSDP unit and its module share one
    return sum(p._sharded_size.numel() * p.element_size() for p in flat.values())


@contextlib.contextmanager
def _one_sequence_a_row() -> Iterator[None]:
    """Hugging Face's attention masks as a real step without padding has them: none, SDPA's and
    flash attention's own causal masking. transformers takes fake tensors for a graph being traced,
    where it cannot read whether a row packs several sequences, and so builds a (batch, 1, seq, seq)
    mask that a real step never holds, and SDPA saves a float copy of it in every layer (the tiny
    Llama at 2 x 64 tokens: 8 KiB, then 32 KiB a layer, all of what its estimate had above its real
    run). Every row is one sequence here (the step's ids are unpadded and unpacked)."""
    masking: Any = sys.modules.get("transformers.masking_utils")
    found = getattr(masking, "find_packed_sequence_indices", None)
    if found is None:
        yield
        return
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = found



def _name(category: Any) -> str:
    """The tracker's category (a str enum: SHARDED_PARAM, ..., or the key "Total"), lower case."""
    return str(getattr(category, "name", category)).lower()




__all__ = ["DTYPES", "measure", "tracked_step"]
