"""Find checkpoints in a checkpoint directory and tell complete ones from partial ones. Torch-free.

Two layouts are recognised:

* ours (``fsdp_orch.runtime``): ``step-<N>/`` (``N`` may be zero-padded) holding DCP shard files,
  DCP's ``.metadata`` (written last by DCP's coordinator) and our commit record ``COMMITTED``
  (JSON, written atomically by rank 0 once every rank has finished). Complete = both exist and
  ``COMMITTED`` names the same step.
* Hugging Face Trainer: ``checkpoint-<N>/``; complete = ``trainer_state.json`` exists (the
  Trainer writes it after the model, optimizer and RNG files).

The functions take a small storage protocol so the supervisor can ask the same question of a
remote filesystem; ``LocalStorage`` is the default.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

COMMIT_FILE = "COMMITTED"
METADATA_FILE = ".metadata"
HF_COMPLETE_FILE = "trainer_state.json"
STEP_DIR = re.compile(r"step-(\d+)")
HF_DIR = re.compile(r"checkpoint-(\d+)")


class Storage(Protocol):
    """What checkpoint discovery needs from a filesystem."""

    def list_dir(self, path: str) -> list[str]:
        """Names of the entries of ``path``; [] when it does not exist."""
        ...

    def is_dir(self, path: str) -> bool: ...

    def exists(self, path: str) -> bool: ...

    def read_text(self, path: str) -> str | None:
        """The file's text, or None when it cannot be read."""
        ...


class LocalStorage:
    def list_dir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError):
            return None


LOCAL = LocalStorage()


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    complete: bool
    layout: str  # "dcp" (ours) or "hf" (Hugging Face Trainer)


def step_dir_name(step: int) -> str:
    """The directory name the runtime writes for ``step`` (zero-padded so names sort by step)."""
    return f"step-{step:08d}"


def parse_commit(text: str | None) -> dict | None:
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


def checkpoint_info(path: str | os.PathLike[str], storage: Storage = LOCAL) -> CheckpointInfo | None:
    """Describe one checkpoint directory; None when its name is not a checkpoint name."""
    path = Path(os.path.expanduser(os.fspath(path)))
    name = path.name
    if match := STEP_DIR.fullmatch(name):
        step = int(match.group(1))
        commit = parse_commit(storage.read_text(str(path / COMMIT_FILE)))
        complete = (commit is not None and commit["step"] == step
                    and storage.exists(str(path / METADATA_FILE)))
        return CheckpointInfo(step, path, complete, "dcp")
    if match := HF_DIR.fullmatch(name):
        step = int(match.group(1))
        return CheckpointInfo(step, path, storage.exists(str(path / HF_COMPLETE_FILE)), "hf")
    return None


def list_checkpoints(directory: str | os.PathLike[str], storage: Storage = LOCAL) -> list[CheckpointInfo]:
    """Every checkpoint directory in ``directory``, oldest step first (complete before partial)."""
    base = os.path.expanduser(os.fspath(directory))
    found = []
    for name in storage.list_dir(base):
        full = os.path.join(base, name)
        if not (STEP_DIR.fullmatch(name) or HF_DIR.fullmatch(name)) or not storage.is_dir(full):
            continue
        info = checkpoint_info(full, storage)
        if info is not None:
            found.append(info)
    found.sort(key=lambda c: (c.step, not c.complete, c.path.name))
    return found


def latest_complete(directory: str | os.PathLike[str], storage: Storage = LOCAL) -> CheckpointInfo | None:
    """The complete checkpoint with the highest step, or None."""
    complete = [c for c in list_checkpoints(directory, storage) if c.complete]
    return complete[-1] if complete else None


__all__ = ["CheckpointInfo", "LocalStorage", "Storage", "checkpoint_info", "latest_complete",
           "list_checkpoints", "parse_commit", "step_dir_name", "COMMIT_FILE", "METADATA_FILE"]
