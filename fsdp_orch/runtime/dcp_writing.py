"""How a save goes through DCP's writers: the async saves' CPU staging buffers, reused from save to
save; the sync save without torch.save's unchecked CRC-32s; and the writer that crashes a rank on
purpose between its shards and the commit (``FSDP_ORCH_FAULT=checkpoint_crash``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.staging import AsyncStager

from fsdp_orch.bootstrap.faults import FaultInjector


def crashing_writer(path: Path, faults: FaultInjector, step: int):
    """A DCP writer of ``path`` that writes this rank's shards, then has ``faults`` crash the rank
    before the save can be committed (``checkpoint_crash``)."""
    from torch.distributed.checkpoint import FileSystemWriter

    class CrashingWriter(FileSystemWriter):
        """Writes this rank's shards, then dies before the save can be committed."""

        def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
            result = super().write_data(plan, planner)
            result.wait()
            faults.crash_in_checkpoint(step, [p.name for p in path.iterdir()])
            return result

    return CrashingWriter(str(path))


class CachingStager(AsyncStager):
    """DCP async stager that copies the state into CPU buffers allocated once and reused by every
    later save (pinned on CUDA). Allocating fresh buffers each time costs page faults that, on a
    CPU-only machine, dominate the time training is blocked. The buffers are rebuilt when the
    state's structure changes; they are free for reuse because a save waits for the previous one.
    """

    _synchronize_after_execute = False

    def __init__(self) -> None:
        self.cache: dict[str, Any] | None = None

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        if self.cache is not None:
            try:
                return _copy_state_dict(state_dict, self.cache)
            except Exception:  # noqa: BLE001 - a changed structure: rebuild the buffers below
                self.cache = None
        self.cache = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
        return _copy_state_dict(state_dict, self.cache)

    def synchronize_staging(self) -> None:
        pass

    def close(self) -> None:
        self.cache = None


@contextlib.contextmanager
def no_crc32() -> Iterator[None]:
    """torch.save writes a CRC-32 per record that torch.load never checks (DCP loads through
    torch.load); skipping it makes a sync save about 20% faster. Only around a sync save, while
    the training thread is ours: the switch is process-wide."""
    previous = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(previous)


__all__ = ["CachingStager", "crashing_writer", "no_crc32"]
