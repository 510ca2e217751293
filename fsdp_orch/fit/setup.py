"""What an estimate runs, read from a job and its cluster (pure): the ranks and how FSDP shards
over them, the job's FSDP options, and its ``fit:`` block."""

from __future__ import annotations

from dataclasses import dataclass

from fsdp_orch.fit.model_source import FACTORY_SEP
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


# the fit: block's knobs that change the budget or the notes, never the measurement
NOT_MEASURED = {"optimizer_offload", "compile", "packed"}


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
    fsdp_version: int = 2  # 1: FullyShardedDataParallel's flat parameters
    use_orig_params: bool = True  # FSDP1's
    backward_prefetch: str = "BACKWARD_PRE"  # FSDP1's
    forward_prefetch: bool = False  # FSDP1's
    reshard_override: bool | None = None  # the job's fsdp.reshard_after_forward, when given
    # the job's script (or module) and its args, after --set: what a model factory reads as
    # sys.argv, so that a factory that parses the command line builds the model the ranks build
    argv: tuple[str, ...] = ()

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
        if self.reshard_override is not None:
            return self.reshard_override
        return STRATEGIES[self.strategy][1]

    @property
    def checkpointing(self) -> str:
        """none, full, selective-op or selective-layer: the fit block's, else the job's."""
        mode = self.fit.activation_checkpointing
        if mode == "job":
            return "full" if self.activation_checkpointing else "none"
        return mode

    def key(self) -> dict[str, object]:
        """Everything the measurement depends on but the model's own text (the cache's key).
        Not offload (of the parameters or the optimizer alone): it moves what was measured to
        host memory in the budget, so a job with and without it share one measurement; nor
        what is named as not modelled, or changes nothing measured (``NOT_MEASURED``)."""
        return {"nodes": self.nodes, "procs_per_node": self.procs_per_node,
                "strategy": self.strategy, "mixed_precision": self.mixed_precision,
                "activation_checkpointing": self.activation_checkpointing,
                "layer_classes": list(self.layer_classes), "wrap": self.wrap,
                "fit": self.fit.model_dump(mode="json", exclude=NOT_MEASURED),
                "fsdp_version": self.fsdp_version,
                "use_orig_params": self.use_orig_params,
                "backward_prefetch": self.backward_prefetch,
                "forward_prefetch": self.forward_prefetch,
                "reshard_override": self.reshard_override,
                **({"argv": list(self.argv)} if self.model_is_factory else {})}

    @property
    def model_is_factory(self) -> bool:
        """``fit.model`` names a ``module:function`` (which may read the job's args), not a
        Hugging Face config (which cannot)."""
        model = self.fit.model
        return FACTORY_SEP in model and not model.endswith(".json")


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
                    wrap=fsdp.auto_wrap_policy, fit=job.fit, fsdp_version=fsdp.version,
                    use_orig_params=fsdp.use_orig_params,
                    backward_prefetch=fsdp.backward_prefetch,
                    forward_prefetch=fsdp.forward_prefetch,
                    reshard_override=fsdp.reshard_after_forward,
                    argv=(job.script or job.module or "", *job.args))


def unmodelled(setup: FitSetup, job: JobSpec | None = None) -> list[str]:
    """A line for each knob the job sets that the estimate does not model as it runs, saying
    what was measured instead (never ignored in silence)."""
    fit, lines = setup.fit, []
    if fit.compile:
        lines.append("not modelled: fit.compile (torch.compile); measured in eager mode, which "
                     "holds more activations than compiled code (torchtitan's Llama 3.1 8B: "
                     "82.4 GiB eager, 77.0 GiB compiled)")
    if setup.wrap == "SIZE_BASED_WRAP":
        lines.append("not modelled: fsdp.auto_wrap_policy SIZE_BASED_WRAP; measured with each "
                     "transformer layer one FSDP unit")
    if setup.fsdp_version == 2 and job is not None:
        fsdp = job.fsdp
        fsdp1_only = [name for name, value, default in (
            ("backward_prefetch", fsdp.backward_prefetch, "BACKWARD_PRE"),
            ("forward_prefetch", fsdp.forward_prefetch, False),
            ("use_orig_params", fsdp.use_orig_params, True)) if value != default]
        if fsdp1_only:
            lines.append(f"not modelled: fsdp.{', fsdp.'.join(fsdp1_only)} (FSDP1's options); "
                         "measured as FSDP2 (fsdp.version: 2) runs, which prefetches one layer")
    if fit.optimizer_in_backward and setup.fsdp_version == 1:
        lines.append("not modelled: fit.optimizer_in_backward with FSDP1; measured with the "
                     "optimizer stepped after the backward pass")
    return lines + args_disagree(setup)


# the flags by which scripts commonly take a micro-batch's sequences and a sequence's tokens
BATCH_FLAGS = ("--batch-size", "--batch_size", "--per_device_train_batch_size",
               "--per-device-train-batch-size", "--micro-batch-size", "--micro_batch_size")
SEQ_FLAGS = ("--seq-len", "--seq_len", "--seq-length", "--seq_length", "--max_seq_length",
             "--max-seq-length", "--max_seq_len", "--max-seq-len", "--block_size", "--block-size")


def args_disagree(setup: FitSetup) -> list[str]:
    """A line for ``fit.batch_size`` or ``fit.seq_len`` where the job's args give the script
    another value by a common flag (``--seq-len 512`` against ``seq_len: 64``): the estimate is
    for the fit block's, which may not be what the ranks run."""
    lines = []
    for field, flags, value in (("batch_size", BATCH_FLAGS, setup.fit.batch_size),
                                ("seq_len", SEQ_FLAGS, setup.fit.seq_len)):
        given = _flag_value(setup.argv[1:], flags)
        if given is not None and given[1] != value:
            lines.append(f"fit.{field} is {value}, and the job's args give {given[0]} "
                         f"{given[1]}: measured at {value} (set fit.{field}: {given[1]} to "
                         "measure what the ranks run)")
    return lines


def _flag_value(args: tuple[str, ...], flags: tuple[str, ...]) -> tuple[str, int] | None:
    """The last whole number given to one of ``flags`` (``--flag N`` or ``--flag=N``)."""
    found = None
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag not in flags:
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        if value.isdigit():
            found = (flag, int(value))
    return found


__all__ = ["STRATEGIES", "FitSetup", "args_disagree", "fit_setup", "unmodelled"]
