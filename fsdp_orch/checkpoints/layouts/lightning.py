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
# last.ckpt, last-v1.ckpt...; or a .ckpt whose name holds step=N (the first one):
# epoch=0-step=100.ckpt.
CKPT = re.compile(r"(?s)(?:(?P<last>last(?:-v(?P<version>\d+))?)|.*?step=(?P<step>\d+).*)\.ckpt")


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


def ckpt_step(match: re.Match[str], siblings: Sequence[CheckpointInfo] | None) -> Step | None:
    """``step=N`` in the name; for a ``last``, the newest complete numbered ``.ckpt``'s (else any
    one's; 0 when there is none), so it is asked again with its ``siblings``."""
    if match["last"] is None:
        return Step(int(match["step"]))
    if siblings is None:
        return None
    numbered = [c for c in siblings if c.layout == LIGHTNING]
    complete = [c.step for c in numbered if c.complete]
    return Step(max(complete or [c.step for c in numbered] or [0]))


def last_version(match: re.Match[str]) -> int:
    """Where a checkpoint sorts among those of its step: numbered files first (0), then
    ``last.ckpt`` (1), ``last-v1.ckpt`` (2)..."""
    return 0 if match["last"] is None else 1 + int(match["version"] or 0)


__all__ = ["CKPT", "ckpt_step", "judge", "last_version"]
