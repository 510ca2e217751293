"""The consolidated model at the end of training (``save_full_at_end``, FULL_STATE_DICT): the
full state dict gathered to rank 0's CPU memory and written as ``<checkpoint dir>/full/model.pt``,
with an ``INFO.json`` beside it, each atomically."""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from fsdp_orch.runtime import ckpt_files as files
from fsdp_orch.runtime.ckpt_errors import CheckpointError

FULL_MODEL_DIR = "full"


def write_full_model(model: nn.Module, directory: Path, step: int, rank: int,
                     group: dist.ProcessGroup) -> Path:
    """Gather ``model``'s full state on rank 0 (CPU) and write it under ``directory/full``; every
    rank raises ``CheckpointError`` when rank 0 could not write it."""
    import io
    import json

    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(
        full_state_dict=True, cpu_offload=True))
    target = directory / FULL_MODEL_DIR
    error: list[str | None] = [None]
    if rank == 0:
        try:
            target.mkdir(parents=True, exist_ok=True)
            buffer = io.BytesIO()
            torch.save(state, buffer)
            files.atomic_write(target / "model.pt", buffer.getvalue())
            files.atomic_write(target / "INFO.json", json.dumps(
                {"step": step, "format": "torch.save state_dict (full, unsharded)",
                 "time": time.time()}).encode())
        except OSError as exc:
            error = [f"cannot write {target}: {exc}"]
    dist.broadcast_object_list(error, src=0, group=group)
    if error[0]:
        raise CheckpointError(str(error[0]))
    return target / "model.pt"
