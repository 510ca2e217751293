"""The process group: init from torchrun's environment, pick the device, shut down cleanly.

On CUDA the default group is ``cuda:nccl,cpu:gloo`` (NCCL for tensors on GPUs, gloo for CPU
tensors, which DCP's async save needs); on CPU it is gloo. The timeout is the job's
``watch.collective_timeout``. Without torchrun (no ``RANK``) the script runs as a world of one.

On XLA (``PJRT_DEVICE`` set and torch_xla installed) rank and world come from the PJRT runtime
through the ``xla://`` init method. Under SPMD (FSDPv2) there is one process per host and the
default group is gloo: the XLA compiler does the collectives on tensors, torch_xla's ``xla``
backend refuses SPMD, and the group only serves checkpoints and agreement between hosts. Otherwise
(XlaFullyShardedDataParallel: one process per chip) it is torch_xla's ``xla`` backend.
``PJRT_DEVICE=CPU`` without torch_xla is the CPU stand-in for a TPU VM: the gloo path above.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

import torch
import torch.distributed as dist

from fsdp_orch.observe.nccl_env import apply_env_defaults, nccl_env_defaults
from fsdp_orch.vocab.errors import FsdpOrchError


class TorchXlaUnavailable(FsdpOrchError):
    """``PJRT_DEVICE`` names an XLA accelerator, but torch_xla cannot be imported."""


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str  # of the default process group
    xla_spmd: bool = False  # XLA under SPMD: one process per host drives all its chips

    @property
    def nnodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def xla_choice(pjrt_device: str | None,
               torch_xla_installed: bool) -> Literal["xla", "torch", "missing"]:
    """Where this process runs: "xla", "torch" (CUDA or CPU as without PJRT), or "missing" (an
    error: training on the host's CPU instead of the TPU would only look like success)."""
    device = (pjrt_device or "").strip().upper()
    if not device:
        return "torch"
    if torch_xla_installed:
        return "xla"
    return "torch" if device == "CPU" else "missing"


def init_distributed(timeout_s: float, attempt_dir: Path | None = None, *,
                     xla_spmd: bool = True) -> DistInfo:
    """Initialise the default process group (or reuse one the caller made) and the device.

    ``xla_spmd``: on an XLA device, run under SPMD (FSDPv2) rather than one process per chip.
    """
    pjrt_device = os.environ.get("PJRT_DEVICE")
    choice = xla_choice(pjrt_device, importlib.util.find_spec("torch_xla") is not None)
    if choice == "missing":
        raise TorchXlaUnavailable(_torch_xla_missing(str(pjrt_device), "is not installed"))
    if choice == "xla":
        return _init_xla(timeout_s, str(pjrt_device), spmd=xla_spmd)
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


def _init_xla(timeout_s: float, pjrt_device: str, *, spmd: bool) -> DistInfo:
    try:
        import torch_xla
        import torch_xla.distributed.xla_backend  # noqa: F401 - registers "xla" and xla://
        import torch_xla.runtime as xr
    except ImportError as exc:
        raise TorchXlaUnavailable(_torch_xla_missing(pjrt_device,
                                                     f"cannot be imported ({exc})")) from None
    if spmd:
        xr.use_spmd()  # before any tensor reaches the device
    backend = "gloo" if spmd else "xla"
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method="xla://", timeout=timedelta(seconds=timeout_s))
    check_xla_world(os.environ.get("WORLD_SIZE"), dist.get_world_size(), pjrt_device)
    local_rank, local_world = (0, 1) if spmd else (xr.local_ordinal(), xr.local_process_count())
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                    local_world_size=local_world, device=torch_xla.device(), backend=backend,
                    xla_spmd=spmd)


def check_xla_world(launched: str | None, pjrt_world: int, pjrt_device: str) -> None:
    """Refuse a launch of more processes than the PJRT client joins into one world: PJRT's CPU
    client is a world of one per process (measured with torch_xla 2.9.0: two processes under
    torchrun each saw ``world_size() == 1``), and each would train alone, reporting success."""
    started = int(launched) if launched and launched.isdigit() else 1
    if pjrt_world < started:
        raise TorchXlaUnavailable(
            f"{started} processes were started (WORLD_SIZE={started}), but the PJRT {pjrt_device} "
            f"client sees a world of {pjrt_world}: each process would train alone. PJRT's CPU "
            "client is one process (give it devices with CPU_NUM_DEVICES and use FSDPv2); on a "
            "TPU, start one process per worker (launcher: xla)")


def _torch_xla_missing(pjrt_device: str, what: str) -> str:
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    package = "torch_xla[tpu]" if pjrt_device.strip().upper() == "TPU" else "torch_xla"
    return (f"PJRT_DEVICE={pjrt_device} but torch_xla {what} in {sys.executable}; install the "
            f"torch_xla built for torch {version} (pip install '{package}=={version}.*')")


def shutdown() -> None:
    """Destroy the process group (after a barrier, so no rank leaves while others still talk)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


__all__ = ["DistInfo", "TorchXlaUnavailable", "check_xla_world", "init_distributed", "shutdown",
           "xla_choice"]
