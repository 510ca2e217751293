"""From the tracked peak to each GPU's budget, the table and the verdict (pure).

The tracker counts the tensors one rank holds. What fake tensors cannot show is added as stated
models, each named in the output:

- the CUDA context and cuBLAS/cuDNN workspaces: ``CUDA_CONTEXT_GIB`` a process;
- NCCL's buffers: ``NCCL_GIB`` a process group (HSDP has two);
- the caching allocator's slack (reserved but not allocated: fragmentation, blocks kept for
  reuse): ``ALLOCATOR_SLACK`` of the tracked peak, ``FSDP1_ALLOCATOR_SLACK`` with FSDP1, whose
  ``record_stream`` on gathered parameters keeps their blocks until the compute stream is past
  them (FSDP2 was written to end that). FSDP1's is the mean of the two ratios of reserved to
  allocated that Answer.AI published for one run each (Llama-2-7B LoRA at 512 and 2048 tokens:
  10.24 / 8.28 and 10.22 / 9.16 GiB); those two runs are the estimate's tuning set, and not among
  the figures it is held to;
- QLoRA's quantization constants (bitsandbytes' ``quant_state``), kept whole on every rank;
- with ``offload_params``, the sharded parameters, gradients and optimizer state live in host
  memory: they leave the GPU's peak and make the CPU RAM a node needs (with
  ``optimizer_offload``, the optimizer state alone);
- a paged optimizer's state lives in CUDA unified memory, outside PyTorch's allocator: in the
  process's total, never in ``max_memory_allocated`` or ``max_memory_reserved``.

Three statistics are answered, as published figures give one or another: what PyTorch's tensors
hold at the peak (``torch.cuda.max_memory_allocated``), what its caching allocator holds
(``max_memory_reserved``: allocated and the slack), and the process's whole GPU memory as
``nvidia-smi`` shows it (reserved, the CUDA context, NCCL and paged memory), which is what the
verdict holds against the GPU.

The verdict refuses only what does not fit beyond the estimate's measured error
(``MEASURED_ERROR``: the largest error over the published figures it is held to within,
``tests/integration/test_fit.py``): a peak above the GPU's memory but within it "may not fit", and
is not refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = float(1 << 30)
CUDA_CONTEXT_GIB = 0.5
NCCL_GIB = 0.25
ALLOCATOR_SLACK = 0.10
FSDP1_ALLOCATOR_SLACK = 0.18
TIGHT = 0.90  # a peak above this share of the GPU is said to be tight
MEASURED_ERROR = 0.15  # the published figures' tolerance (tests/integration/test_fit.py)

# the tracker's categories (FSDPMemTracker's _FSDPRefType, lower case) by the table's rows
ROWS = (
    ("parameters", ("sharded_param", "unsharded_param", "param", "buffer")),
    ("gradients", ("sharded_grad", "unsharded_grad")),
    ("optimizer state", ("opt",)),
    ("activations", ("act", "inp")),
    ("communication buffers", ("all_gather", "reduce_scatter")),
    ("temporary", ("temp",)),
)
OFFLOADED = ("sharded_param", "sharded_grad", "opt")
PAGED = "paged optimizer state (unified memory)"
QUANT = "4-bit quantization constants"


@dataclass(frozen=True)
class Budget:
    rows: dict[str, float]  # GiB a GPU, by row (the tracked part)
    other: dict[str, float]  # GiB a GPU, by stated model
    peak_gib: float
    cpu_ram_gib_per_node: float | None
    gpu_memory_gib: float | None
    notes: list[str] = field(default_factory=list)
    offloaded: str = "parameters, gradients and optimizer state"  # what the CPU RAM holds

    @property
    def allocated_gib(self) -> float:
        """``torch.cuda.max_memory_allocated``'s: the tracked peak and the quantization
        constants."""
        return sum(self.rows.values()) + self.other.get(QUANT, 0.0)

    @property
    def reserved_gib(self) -> float:
        """``torch.cuda.max_memory_reserved``'s: allocated and the allocator's slack."""
        return self.allocated_gib + sum(v for k, v in self.other.items()
                                        if k.startswith("allocator slack"))

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_memory_gib is None else self.peak_gib <= self.gpu_memory_gib

    @property
    def refused(self) -> bool:
        """Does not fit by more than the estimate's measured error."""
        return (self.gpu_memory_gib is not None
                and self.peak_gib > self.gpu_memory_gib * (1 + MEASURED_ERROR))

    @property
    def tight(self) -> bool:
        """Fits, with less than ``1 - TIGHT`` of the GPU to spare."""
        return bool(self.fits) and self.peak_gib > TIGHT * (self.gpu_memory_gib or 0)

    @property
    def verdict(self) -> str:
        if self.gpu_memory_gib is None:
            return "no verdict: the cluster's profile does not say its gpu_memory (or --gpu-memory)"
        share = self.peak_gib / self.gpu_memory_gib
        if self.refused:
            return f"does not fit: {share:.0%} of {self.gpu_memory_gib:.1f} GiB"
        if share > 1:
            return (f"may not fit: {share:.0%} of {self.gpu_memory_gib:.1f} GiB, within the "
                    f"estimate's measured error ({MEASURED_ERROR:.0%}): not refused")
        return f"{'fits, tight' if share > TIGHT else 'fits'}: {share:.0%} of " \
               f"{self.gpu_memory_gib:.1f} GiB"


def budget(peak: dict[str, int], *, offload: bool, procs_per_node: int, process_groups: int,
           quant_state_bytes: float = 0.0, gpu_memory: int | None = None,
           optimizer_offload: bool = False, paged_optimizer: bool = False,
           sharded_bytes: int | None = None, slack: float = ALLOCATOR_SLACK) -> Budget:
    """``peak``: one rank's bytes at its peak by tracker category (FSDP1's parameters as one,
    "param", with ``sharded_bytes`` their shards)."""
    moved = OFFLOADED if offload else ("opt",) if optimizer_offload else ()
    away = moved + (("opt",) if paged_optimizer else ())
    on_gpu = {k: (0 if k in away else v) for k, v in peak.items()}
    flat_moved = 0  # FSDP1: its flat parameters' shards, within what it held at the peak
    if offload and sharded_bytes is not None:
        flat_moved = min(sharded_bytes, peak.get("param", 0))
        on_gpu["param"] = peak.get("param", 0) - flat_moved
    rows = {row: sum(on_gpu.get(k, 0) for k in keys) / GIB for row, keys in ROWS}
    tracked = sum(rows.values())
    other = {"CUDA context": CUDA_CONTEXT_GIB, "NCCL buffers": NCCL_GIB * process_groups}
    if quant_state_bytes:
        other[QUANT] = quant_state_bytes / GIB
    other[f"allocator slack ({slack:.0%} of the tracked)"] = (
        tracked + other.get(QUANT, 0.0)) * slack
    if paged_optimizer and "opt" not in moved:
        other[PAGED] = peak.get("opt", 0) / GIB
    cpu = None
    if moved:
        cpu = (sum(peak.get(k, 0) for k in moved) + flat_moved) * procs_per_node / GIB
    return Budget(rows=rows, other=other, peak_gib=tracked + sum(other.values()),
                  cpu_ram_gib_per_node=cpu,
                  gpu_memory_gib=None if gpu_memory is None else gpu_memory / GIB,
                  offloaded=("parameters, gradients and optimizer state" if offload
                             else "optimizer state"))


def shown(gib: float) -> str:
    return f"{gib:8.1f} GiB" if gib >= 1 or gib == 0 else f"{gib * 1024:8.1f} MiB"


def table(b: Budget, heading: list[str]) -> str:
    lines = [*heading, "per GPU at its peak:"]
    for name, gib in b.rows.items():
        lines.append(f"  {name:<42}{shown(gib)}")
    for name, gib in b.other.items():
        lines.append(f"  {name:<42}{shown(gib)}  (stated model)")
    lines.append(f"  {'peak':<42}{shown(b.peak_gib)}  {b.verdict}")
    lines.append(f"  {'of which max_memory_allocated':<42}{shown(b.allocated_gib)}")
    lines.append(f"  {'of which max_memory_reserved':<42}{shown(b.reserved_gib)}")
    if b.cpu_ram_gib_per_node is not None:
        lines.append(f"CPU RAM a node (offloaded {b.offloaded}): "
                     f"{b.cpu_ram_gib_per_node:.1f} GiB")
    lines += b.notes
    return "\n".join(lines) + "\n"


def as_json(b: Budget) -> dict[str, object]:
    return {"peak_gib_per_gpu": round(b.peak_gib, 2),
            "max_memory_allocated_gib": round(b.allocated_gib, 2),
            "max_memory_reserved_gib": round(b.reserved_gib, 2),
            "refused": b.refused,
            "gpu_memory_gib": None if b.gpu_memory_gib is None else round(b.gpu_memory_gib, 2),
            "fits": b.fits, "verdict": b.verdict,
            "per_gpu_gib": {k: round(v, 3) for k, v in b.rows.items()},
            "stated_gib": {k: round(v, 3) for k, v in b.other.items()},
            "cpu_ram_gib_per_node": (None if b.cpu_ram_gib_per_node is None
                                     else round(b.cpu_ram_gib_per_node, 2)),
            "notes": b.notes}


__all__ = ["ALLOCATOR_SLACK", "CUDA_CONTEXT_GIB", "FSDP1_ALLOCATOR_SLACK", "MEASURED_ERROR",
           "NCCL_GIB", "PAGED", "Budget", "as_json", "budget", "table"]
