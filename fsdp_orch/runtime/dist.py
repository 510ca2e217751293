"""The process group: init from torchrun's environment, pick the device, shut down cleanly.

On CUDA the default group is ``cuda:nccl,cpu:gloo`` (NCCL for tensors on GPUs, gloo for CPU
tensors, which DCP's async save needs); on CPU it is gloo. The timeout is the job's
``watch.collective_timeout``. Without torchrun (no ``RANK``) the script runs as a world of one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from fsdp_orch.nccl_env import apply_env_defaults, nccl_env_defaults


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def nnodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(timeout_s: float, attempt_dir: Path | None = None) -> DistInfo:
    """Initialise the default process group (or reuse one the caller made) and the device."""
    if "RANK" not in os.environ:  # plain `python train.py`: a world of one
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
    rank = int(os.environ["RANK"])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "cpu:gloo,cuda:nccl"
        if attempt_dir is not None:
            attempt_dir.mkdir(parents=True, exist_ok=True)
        apply_env_defaults(nccl_env_defaults(str(attempt_dir) if attempt_dir else None), os.environ)
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if not dist.is_initialized():
        timeout = timedelta(seconds=timeout_s)
        if world == 1 and "MASTER_ADDR" not in os.environ:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                    timeout=timeout)
        else:
            dist.init_process_group(backend, timeout=timeout, rank=rank, world_size=world,
                                    device_id=device if device.type == "cuda" else None)
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                    local_world_size=local_world, device=device, backend=backend)


def shutdown() -> None:
    """Destroy the process group (after a barrier, so no rank leaves while others still talk)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


__all__ = ["DistInfo", "init_distributed", "shutdown"]
