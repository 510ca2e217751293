"""The most memory a rank's accelerator has held in tensors, read for its heartbeat: on CUDA,
``torch.cuda.max_memory_allocated`` of the rank's current device, what ``fsdp-orch fit`` estimates
(the caching allocator's reserved slack and the CUDA context are not in it). Imports nothing: a
process that has not initialised CUDA itself reads nothing."""

from __future__ import annotations

import sys


def cuda_peak_bytes() -> int | None:
    """None unless this process loaded ``torch.cuda`` and initialised it."""
    cuda = sys.modules.get("torch.cuda")
    if cuda is None:
        return None
    try:
        if not cuda.is_initialized():
            return None
        return int(cuda.max_memory_allocated())
    except Exception:  # a device lost or a driver error: no reading, never a failed write
        return None


__all__ = ["cuda_peak_bytes"]
