"""A job's checkpoints as the supervisor polls them: the latest complete one at each poll, and a
mark for it that moves with every new save, so that a crash loop (no new checkpoint between
restarts) can be told even for a file whose step nothing tells."""

from __future__ import annotations

from collections.abc import Callable

from fsdp_orch.checkpoints.info import CheckpointInfo
from fsdp_orch.checkpoints.single_file import fingerprint
from fsdp_orch.checkpoints.source import CheckpointSource

SaveKey = tuple[str, int | None, bytes | None]  # a file of unknown step: path, size, last KiB


class PolledCheckpoints:
    """The latest complete checkpoint of ``source()`` at each poll (asked at each use: a TPU VM's
    storage is known once its workers are, and changes with a re-created VM). A ``checkpoint.file``
    counts once its size is the one of the previous poll (the first poll takes one look as both)."""

    def __init__(self, source: Callable[[], CheckpointSource]):
        self.source = source
        self._look: dict[str, int] = {}  # checkpoint.file: the sizes at the previous poll
        self._saves: dict[SaveKey, int] = {}  # files of unknown step, by save

    def latest(self) -> CheckpointInfo | None:
        """This poll's latest complete checkpoint; its sizes are the next poll's first look."""
        source = self.source()
        info = source.latest(self._look or None)
        self._look = source.sizes()
        return info

    def mark(self, info: CheckpointInfo | None) -> int | None:
        """``info``'s step, or for a file of unknown step -N for the Nth save of it seen."""
        if info is None:
            return None
        if info.step_known:
            return info.step
        key = (str(info.path), *fingerprint(str(info.path), self.source().storage))
        return -self._saves.setdefault(key, len(self._saves) + 1)


__all__ = ["PolledCheckpoints"]
