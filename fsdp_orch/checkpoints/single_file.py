"""The single-file checkpoint layout (``checkpoint.file``: nanoGPT's ``out/ckpt.pt``,
``ckpt-*.pt``, ``model_{step}.pt``). Torch-free, behind the same ``Storage`` as the folder layouts.

* A file is **whole** when it is a whole zip archive, a whole legacy ``torch.save`` file or a
  whole plain pickle (fsdp_orch.checkpoints.pickles).
* It is **complete** when it is whole and its size did not change between two looks (the caller
  passes the first look's sizes, or :func:`looked_twice` takes them with an injected sleep).
* Its **step** comes from its name (``{step}`` in the pattern, or a ``*`` that matched only
  digits), else from ``step_key`` read out of the pickle by an unpickler that never runs a global
  (every class is a stand-in), else it is unknown: ``CheckpointInfo.step_known`` is False.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from fsdp_orch.checkpoints.aside import OWN_DIRS
from fsdp_orch.checkpoints.globs import WILDCARDS, fixed_folder
from fsdp_orch.checkpoints.info import FILE, CheckpointInfo
from fsdp_orch.checkpoints.pickles import int_under, whole_file
from fsdp_orch.checkpoints.storage import Storage

STEP_PLACEHOLDER = "{step}"
SETTLE_S = 0.5  # the pause between the two looks at a file's size
# Where the folder holds files that are checkpoints to a script but no layout of ours.
CHECKPOINT_LIKE = (".pt", ".pth", ".ckpt", ".bin", ".pkl", ".pickle", ".tar", ".safetensors")


@dataclass(frozen=True)
class FileLayout:
    """``pattern``: an absolute path whose parts may hold ``*``/``?``/``[...]``, and whose file
    name may hold ``{step}`` (the step's digits). ``step_key``: the int under this key of the saved
    dict."""

    pattern: str
    step_key: str | None = None

    @property
    def folder(self) -> str:
        return fixed_folder(self.pattern)


def name_regex(name_pattern: str) -> re.Pattern[str]:
    """The file-name pattern as a regex; ``{step}`` is group ``step``, each wildcard a group
    ``wN``."""
    out, n = [], 0
    for i, piece in enumerate(name_pattern.split(STEP_PLACEHOLDER)):
        if i:
            out.append(r"(?P<step>\d+)")
        for token in re.split(r"(\*|\?|\[[^\]]*\])", piece):
            if token == "*":
                out.append(f"(?P<w{n}>.*)")
                n += 1
            elif token == "?":
                out.append(f"(?P<w{n}>.)")
                n += 1
            elif token.startswith("[") and token.endswith("]") and len(token) > 2:
                out.append(fnmatch.translate(token)[4:-3])  # fnmatch's class, without (?s: and )\Z
            else:
                out.append(re.escape(token))
    return re.compile("".join(out))


def step_from_name(name_pattern: str, name: str) -> int | None:
    """The step a file's name tells: ``{step}``'s digits, else a wildcard that matched only
    digits."""
    match = name_regex(name_pattern).fullmatch(name)
    if match is None:
        return None
    if STEP_PLACEHOLDER in name_pattern:
        return int(match.group("step"))
    digits = [v for k, v in match.groupdict().items() if k.startswith("w") and v.isdigit()]
    return int(digits[-1]) if len(digits) == 1 else None


def matching_files(layout: FileLayout, storage: Storage) -> list[str]:
    """The files ``layout.pattern`` names, sorted (never inside a folder fsdp-orch moved them
    to)."""
    parts = layout.pattern.split("/")
    folders = ["/" if layout.pattern.startswith("/") else "."]
    for part in [p for p in parts[:-1] if p]:
        if WILDCARDS.search(part):
            folders = [posixpath.join(f, n) for f in folders for n in sorted(storage.list_dir(f))
                       if not n.startswith(OWN_DIRS) and fnmatch.fnmatchcase(n, part)
                       and storage.is_dir(posixpath.join(f, n))]
        else:
            folders = [posixpath.join(f, part) for f in folders]
    regex = name_regex(parts[-1])
    return sorted(posixpath.join(f, n) for f in folders for n in storage.list_dir(f)
                  if regex.fullmatch(n) and not storage.is_dir(posixpath.join(f, n)))


def file_sizes(layout: FileLayout, storage: Storage) -> dict[str, int]:
    """The first look: every matching file's size."""
    sizes = {}
    for path in matching_files(layout, storage):
        size = storage.size(path)
        if size is not None:
            sizes[path] = size
    return sizes


def describe_file(path: str, layout: FileLayout, storage: Storage,
                  first_size: int | None) -> CheckpointInfo:
    """One file of the layout, looked at a second time (``first_size``: its size at the first
    look)."""
    name_step = step_from_name(layout.pattern.rsplit("/", 1)[-1], posixpath.basename(path))
    need_key = name_step is None and layout.step_key is not None
    whole = whole_file(path, storage, want_object=need_key)
    size = storage.size(path)
    if not whole.whole:
        reason = whole.reason
    elif first_size is None or size != first_size:
        reason = (f"its size changed between two looks ({first_size} then {size} bytes): still "
                  "being written")
    else:
        reason = ""
    step, note = name_step, ""
    if step is None and layout.step_key is not None:
        step = int_under(whole.obj, layout.step_key)
        if step is None and not reason:
            note = f"no int under {layout.step_key!r} could be read from the file"
    elif step is None:
        note = "the name has no step and checkpoint.step_key is not set"
    info = CheckpointInfo(step if step is not None else 0, Path(path), not reason, FILE, reason)
    return replace(info, step_known=step is not None, step_note=note)


def list_files(layout: FileLayout, storage: Storage,
               first_look: Mapping[str, int]) -> list[CheckpointInfo]:
    """Every file of the layout, oldest first: by step where known (before any of unknown step,
    whose order is by name), complete before partial at one step."""
    found = [describe_file(p, layout, storage, first_look.get(p))
             for p in matching_files(layout, storage)]
    return sorted(found, key=lambda c: (c.step_known, c.step, not c.complete, str(c.path)))


def looked_twice(layout: FileLayout, storage: Storage, sleep: Callable[[float], None],
                 settle_s: float = SETTLE_S) -> list[CheckpointInfo]:
    """:func:`list_files` with the first look taken ``settle_s`` before (by the injected
    ``sleep``); no pause when nothing matches."""
    first = file_sizes(layout, storage)
    if first:
        sleep(settle_s)
    return list_files(layout, storage, first)


def fingerprint(path: str, storage: Storage) -> tuple[int | None, bytes | None]:
    """What tells two saves of one file apart without a step: its size and its last KiB (a zip's
    central directory holds every entry's CRC, torch's serialization id among them)."""
    return storage.size(path), storage.read_tail(path, 1024)


def stray_files(directory: str, storage: Storage, known: set[str]) -> list[str]:
    """Files directly in a checkpoint folder that a script may have saved as its checkpoint
    (``*.pt``, ``*.pth``, ``*.ckpt``...) but that are none of the checkpoints ``known`` to a
    layout."""
    return sorted(p for n in storage.list_dir(directory)
                  if n.lower().endswith(CHECKPOINT_LIKE)
                  and (p := os.path.join(directory, n)) not in known and not storage.is_dir(p))


def suggested_setting(path: str, workdir: str) -> str:
    """The ``checkpoint.file`` value that names ``path``, relative to the job's workdir."""
    rel = os.path.relpath(path, workdir)
    return rel if not rel.startswith("..") else path


__all__ = ["CHECKPOINT_LIKE", "SETTLE_S", "FileLayout", "describe_file", "file_sizes",
           "fingerprint", "list_files", "looked_twice", "matching_files", "name_regex",
           "step_from_name", "stray_files", "suggested_setting"]
