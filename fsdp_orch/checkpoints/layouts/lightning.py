"""PyTorch Lightning's ``.ckpt`` checkpoints, directly in the checkpoint folder.

Complete = a whole zip archive (what ``torch.save`` writes; a partly written file has no end
record), or for a sharded FSDP save (a ``.ckpt`` folder) DCP's ``.metadata`` plus a whole
``meta.pt``. The step comes from ``step=N`` in the name; ``last.ckpt`` takes the step of the
newest complete numbered file and sorts after it, so that it is the one chosen.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from fsdp_orch.checkpoints.formats import zip_complete
from fsdp_orch.checkpoints.info import LIGHTNING, CheckpointInfo, Step, Verdict
from fsdp_orch.checkpoints.layouts.dcp import METADATA_FILE
from fsdp_orch.checkpoints.storage import Storage

LIGHTNING_SHARDED_META = "meta.pt"
# A .ckpt whose name holds step=N (the first one): epoch=0-step=100.ckpt. No last*.ckpt has one.
NUMBERED = re.compile(r"(?s).*?step=(?P<step>\d+).*\.ckpt")
LAST = re.compile(r"last(?:-v(?P<version>\d+))?\.ckpt")


def judge(path: Path, step: int, storage: Storage) -> Verdict:
    """A ``.ckpt`` file (a whole zip) or a sharded ``.ckpt`` folder (``.metadata``, ``meta.pt``)."""
    if storage.is_dir(str(path)):
        if not storage.exists(str(path / METADATA_FILE)):
            reason = "no .metadata"
        elif not zip_complete(str(path / LIGHTNING_SHARDED_META), storage):
            reason = f"no complete {LIGHTNING_SHARDED_META}"
        else:
            reason = ""
    else:
        reason = "" if zip_complete(str(path), storage) else "not a complete zip archive"
    return Verdict(reason)


def last_step(match: re.Match[str], siblings: Sequence[CheckpointInfo]) -> Step:
    """The step ``last.ckpt`` stands for: the newest complete numbered ``.ckpt`` (else any; 0
    when there is none)."""
    numbered = [c for c in siblings if c.layout == LIGHTNING]
    complete = [c.step for c in numbered if c.complete]
    return Step(max(complete or [c.step for c in numbered] or [0]))


def last_version(match: re.Match[str]) -> int:
    """Where a ``last`` sorts among the checkpoints of its step: 1 for ``last.ckpt``, 2 for
    ``last-v1.ckpt``..., after the numbered files (0)."""
    return 1 + int(match["version"] or 0)


__all__ = ["LAST", "NUMBERED", "judge", "last_step", "last_version"]
