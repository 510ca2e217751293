"""What training scripts import. Typical use (under fsdp-orch or plain torchrun)::

    from fsdp_orch import runtime

    job = runtime.setup()                       # process group, device, job spec
    model = job.shard(build_model)              # FSDP2 per the job's fsdp: options
    optim = torch.optim.AdamW(model.parameters())
    ckpt = job.checkpointer(model, optim)
    start = ckpt.restore()                      # steps already done (0: fresh start)
    for step in range(start + 1, total + 1):
        ...                                     # forward, backward, optim.step()
        job.step_done(step, loss)               # heartbeat, faults, periodic checkpoint
    job.finish()

Names are loaded lazily, so importing this package (e.g. for :mod:`fsdp_orch.runtime.faults`)
does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsdp_orch.runtime.checkpoint import Checkpointer, CheckpointError
    from fsdp_orch.runtime.fsdp import ShardPlan
    from fsdp_orch.runtime.job import Job

_LAZY = {
    "Job": "fsdp_orch.runtime.job",
    "Checkpointer": "fsdp_orch.runtime.checkpoint",
    "CheckpointError": "fsdp_orch.runtime.checkpoint",
    "ShardPlan": "fsdp_orch.runtime.fsdp",
}


def setup() -> Job:
    """Start this rank: see :func:`fsdp_orch.runtime.job.setup`."""
    from fsdp_orch.runtime.job import setup as _setup

    return _setup()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fsdp_orch.runtime' has no attribute {name!r}")


__all__ = ["CheckpointError", "Checkpointer", "Job", "ShardPlan", "setup"]
