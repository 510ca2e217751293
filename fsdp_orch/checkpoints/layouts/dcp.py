"""Torch's distributed checkpoint (DCP) folders, ``step-N/``: ours and anyone else's.

* ``dcp``, ours (``fsdp_orch.runtime``): ``step-%08d/`` holding DCP shard files, DCP's
  ``.metadata`` (written last by DCP's coordinator), per-rank ``rank-<R>.state.pt`` files and our
  commit record ``COMMITTED`` (JSON, written atomically by rank 0 once every rank has finished).
  A ``step-N/`` folder is ours when its name is the zero-padded form or it holds ``COMMITTED`` or
  a rank state file. Complete = ``.metadata`` and a ``COMMITTED`` naming the same step.
* ``dcp-plain``: any other ``step-N/`` folder (torchtitan, a script calling ``dcp.save``).
  Complete = ``.metadata`` exists (DCP writes it last, by rename).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fsdp_orch.checkpoints.info import DCP, DCP_PLAIN, Verdict
from fsdp_orch.checkpoints.storage import Storage

COMMIT_FILE = "COMMITTED"
METADATA_FILE = ".metadata"
RANK_STATE = re.compile(r"rank-\d+\.state\.pt")


def step_dir_name(step: int) -> str:
    """The directory name the runtime writes for ``step`` (zero-padded so names sort by step)."""
    return f"step-{step:08d}"


def parse_commit(text: str | None) -> dict[str, Any] | None:
    """The commit record as a dict, or None when it is missing or not a JSON object with a step."""
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("step"), int):
        return None
    return data


def judge(path: Path, step: int, storage: Storage) -> Verdict:
    """Ours (``dcp``: ``.metadata`` and a ``COMMITTED`` naming ``step``) or plain (``dcp-plain``:
    ``.metadata``)."""
    has_metadata = storage.exists(str(path / METADATA_FILE))
    ours = path.name == step_dir_name(step) or any(
        n == COMMIT_FILE or RANK_STATE.fullmatch(n) for n in storage.list_dir(str(path)))
    if not ours:
        return Verdict("" if has_metadata else "no .metadata", DCP_PLAIN)
    commit = parse_commit(storage.read_text(str(path / COMMIT_FILE)))
    if not has_metadata:
        reason = "no .metadata"
    elif commit is None:
        reason = "no valid COMMITTED record"
    elif commit["step"] != step:
        reason = f"COMMITTED names step {commit['step']}"
    else:
        reason = ""
    return Verdict(reason, DCP)


__all__ = ["COMMIT_FILE", "METADATA_FILE", "judge", "parse_commit", "step_dir_name"]
