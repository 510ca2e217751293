"""From the tracked peak to each GPU's budget, the table and the verdict (pure).

The tracker counts the tensors one rank holds. What fake tensors cannot show is added as stated
models, each named in the output:

- the CUDA context and cuBLAS/cuDNN workspaces: ``CUDA_CONTEXT_GIB`` a process;
- NCCL's buffers: ``NCCL_GIB`` a process group (HSDP has two);
- the caching allocator's slack (reserved but not allocated: fragmentation, blocks kept for
  reuse): ``ALLOCATOR_SLACK`` of the tracked peak;
- QLoRA's quantization constants (bitsandbytes' ``quant_state``), kept whole on every rank;
- with ``offload_params``, the sharded parameters, gradients and optimizer state live in host
  memory: they leave the GPU's peak and make the CPU RAM a node needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = float(1 << 30)
CUDA_CONTEXT_GIB = 0.5
NCCL_GIB = 0.25
ALLOCATOR_SLACK = 0.10
TIGHT = 0.90  # a peak above this share of the GPU is said to be tight

# the tracker's categories (FSDPMemTracker's _FSDPRefType, lower case) by the table's rows
ROWS = (
    ("parameters", ("sharded_param", "unsharded_param", "buffer")),
    ("gradients", ("sharded_grad", "unsharded_grad")),
    ("optimizer state", ("opt",)),
    ("activations", ("act", "inp")),
    ("communication buffers", ("all_gather", "reduce_scatter")),
    ("temporary", ("temp",)),
)
OFFLOADED = ("sharded_param", "sharded_grad", "opt")


@dataclass(frozen=True)
class Budget:
    rows: dict[str, float]  # GiB a GPU, by row (the tracked part)
    other: dict[str, float]  # GiB a GPU, by stated model
    peak_gib: float
    cpu_ram_gib_per_node: float | None
    gpu_memory_gib: float | None
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_memory_gib is None else self.peak_gib <= self.gpu_memory_gib

    @property
    def tight(self) -> bool:
        """Fits, with less than ``1 - TIGHT`` of the GPU to spare."""
        return bool(self.fits) and self.peak_gib > TIGHT * (self.gpu_memory_gib or 0)

    @property
    def verdict(self) -> str:
        if self.gpu_memory_gib is None:
            return "no verdict: the cluster's profile does not say its gpu_memory (or --gpu-memory)"
        share = self.peak_gib / self.gpu_memory_gib
        if share > 1:
            return f"does not fit: {share:.0%} of {self.gpu_memory_gib:.1f} GiB"
        return f"{'fits, tight' if share > TIGHT else 'fits'}: {share:.0%} of " \
               f"{self.gpu_memory_gib:.1f} GiB"


def budget(peak: dict[str, int], *, offload: bool, procs_per_node: int, process_groups: int,
           quant_state_bytes: float = 0.0, gpu_memory: int | None = None) -> Budget:
    """``peak``: one rank's bytes at its peak by tracker category."""
    on_gpu = {k: (0 if offload and k in OFFLOADED else v) for k, v in peak.items()}
    rows = {row: sum(on_gpu.get(k, 0) for k in keys) / GIB for row, keys in ROWS}
    tracked = sum(rows.values())
    other = {"CUDA context": CUDA_CONTEXT_GIB, "NCCL buffers": NCCL_GIB * process_groups,
             f"allocator slack ({ALLOCATOR_SLACK:.0%} of the tracked)": tracked * ALLOCATOR_SLACK}
    if quant_state_bytes:
        other["4-bit quantization constants"] = quant_state_bytes / GIB
    cpu = None
    if offload:
        cpu = sum(peak.get(k, 0) for k in OFFLOADED) * procs_per_node / GIB
    return Budget(rows=rows, other=other, peak_gib=tracked + sum(other.values()),
                  cpu_ram_gib_per_node=cpu,
                  gpu_memory_gib=None if gpu_memory is None else gpu_memory / GIB)


def shown(gib: float) -> str:
    return f"{gib:8.1f} GiB" if gib >= 1 or gib == 0 else f"{gib * 1024:8.1f} MiB"


def table(b: Budget, heading: list[str]) -> str:
    lines = [*heading, "per GPU at its peak:"]
    for name, gib in b.rows.items():
        lines.append(f"  {name:<42}{shown(gib)}")
    for name, gib in b.other.items():
        lines.append(f"  {name:<42}{shown(gib)}  (stated model)")
    lines.append(f"  {'peak':<42}{shown(b.peak_gib)}  {b.verdict}")
    if b.cpu_ram_gib_per_node is not None:
        lines.append(f"CPU RAM a node (offloaded parameters, gradients and optimizer state): "
                     f"{b.cpu_ram_gib_per_node:.1f} GiB")
    lines += b.notes
    return "\n".join(lines) + "\n"


def as_json(b: Budget) -> dict[str, object]:
    return {"peak_gib_per_gpu": round(b.peak_gib, 2),
            "gpu_memory_gib": None if b.gpu_memory_gib is None else round(b.gpu_memory_gib, 2),
            "fits": b.fits, "verdict": b.verdict,
            "per_gpu_gib": {k: round(v, 3) for k, v in b.rows.items()},
            "stated_gib": {k: round(v, 3) for k, v in b.other.items()},
            "cpu_ram_gib_per_node": (None if b.cpu_ram_gib_per_node is None
                                     else round(b.cpu_ram_gib_per_node, 2)),
            "notes": b.notes}


__all__ = ["ALLOCATOR_SLACK", "CUDA_CONTEXT_GIB", "NCCL_GIB", "Budget", "as_json", "budget",
           "table"]
