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

Under fsdp-orch the launch script exports ``FSDP_ORCH_*`` (job.json, run and checkpoint
directories, attempt, resume, faults). Without them (plain ``torchrun``, or ``python train.py`` as
a world of one) the defaults apply: the job spec's defaults (FULL_SHARD, Block-style wrapping by
the model's ``_no_split_modules``, checkpoint every 100 steps, keep 3), checkpoints in
``./checkpoints``, resume ``auto``, attempt 0, no fault injection and no heartbeat files (there is
no run directory for them). ``kill -USR1 <pid>`` prints every thread's stack of a rank.

Names are loaded lazily, so importing this package (e.g. for :mod:`fsdp_orch.runtime.settings`)
does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsdp_orch.runtime.checkpoint import Checkpointer
    from fsdp_orch.runtime.ckpt_errors import CheckpointError
    from fsdp_orch.runtime.fsdp import ShardPlan
    from fsdp_orch.runtime.job import Job

_LAZY = {
    "Job": "fsdp_orch.runtime.job",
    "Checkpointer": "fsdp_orch.runtime.checkpoint",
    "CheckpointError": "fsdp_orch.runtime.ckpt_errors",
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
