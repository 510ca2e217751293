"""What an estimate runs, read from a job and its cluster (pure): the ranks and how FSDP shards
over them, the job's FSDP options, and its ``fit:`` block."""

from __future__ import annotations

from dataclasses import dataclass

from fsdp_orch.jobspec.fit import FitOptions
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.vocab.errors import InputError

# FSDP1's strategies as FSDP2 runs them: (shard within a node only, reshard after forward)
STRATEGIES = {
    "FULL_SHARD": (False, True),
    "SHARD_GRAD_OP": (False, False),
    "NO_SHARD": (None, False),  # replicate over every rank
    "HYBRID_SHARD": (True, True),
    "HYBRID_SHARD_ZERO2": (True, False),
}


@dataclass(frozen=True)
class FitSetup:
    nodes: int
    procs_per_node: int
    strategy: str
    mixed_precision: str  # bf16, fp16 or no
    offload_params: bool
    activation_checkpointing: bool
    layer_classes: tuple[str, ...]  # the classes each wrapped in its own fully_shard ((): found)
    wrap: str  # TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP
    fit: FitOptions

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """(ranks that shard) or (replicas, ranks that shard) for HSDP."""
        within_node, _ = STRATEGIES[self.strategy]
        if within_node is None:
            return (self.world_size, 1)
        if within_node:
            return (self.nodes, self.procs_per_node)
        return (self.world_size,)

    @property
    def reshard_after_forward(self) -> bool:
        return STRATEGIES[self.strategy][1]

    def key(self) -> dict[str, object]:
        """Everything the measurement depends on but the model's own text (the cache's key).
        Not offload: it moves what was measured to host memory in the budget, so a job with and
        without it share one measurement."""
        return {"nodes": self.nodes, "procs_per_node": self.procs_per_node,
                "strategy": self.strategy, "mixed_precision": self.mixed_precision,
                "activation_checkpointing": self.activation_checkpointing,
                "layer_classes": list(self.layer_classes), "wrap": self.wrap,
                "fit": self.fit.model_dump(mode="json")}


def fit_setup(job: JobSpec, procs_per_node: int, job_file: str) -> FitSetup:
    """``procs_per_node``: the job's, else the cluster's default (its GPUs a node)."""
    if job.fit is None:
        raise InputError("the job has no fit: block; expected at least fit: {model: PATH}, a "
                         "Hugging Face config.json (or a folder with one) or module:function",
                         file=job_file, field="fit")
    fsdp = job.fsdp
    return FitSetup(nodes=job.nodes, procs_per_node=job.procs_per_node or procs_per_node,
                    strategy=fsdp.sharding_strategy, mixed_precision=fsdp.mixed_precision,
                    offload_params=fsdp.offload_params,
                    activation_checkpointing=fsdp.activation_checkpointing,
                    layer_classes=tuple(fsdp.transformer_layer_cls_to_wrap),
                    wrap=fsdp.auto_wrap_policy, fit=job.fit)


__all__ = ["STRATEGIES", "FitSetup", "fit_setup"]
