"""Find checkpoints in a checkpoint directory and tell complete ones from partial ones. Torch-free.

Layouts (``CheckpointInfo.layout``):

* ``dcp``, ours (``fsdp_orch.runtime``): ``step-%08d/`` holding DCP shard files, DCP's
  ``.metadata`` (written last by DCP's coordinator), per-rank ``rank-<R>.state.pt`` files and our
  commit record ``COMMITTED`` (JSON, written atomically by rank 0 once every rank has finished).
  A ``step-N/`` folder is ours when its name is the zero-padded form or it holds ``COMMITTED`` or
  a rank state file. Complete = ``.metadata`` and a ``COMMITTED`` naming the same step.
* ``dcp-plain``: any other ``step-N/`` folder (torchtitan, a script calling ``dcp.save``).
  Complete = ``.metadata`` exists (DCP writes it last, by rename).
* ``hf``, the Hugging Face Trainer (or a script using Accelerate's ``save_state`` the same way):
  ``checkpoint-N/``. Complete = ``trainer_state.json`` (written after the model, optimizer and
  RNG files) parses as a JSON object and model weights are there: a weights file, an index whose
  shards all exist, an FSDP ``pytorch_model_fsdp_<k>/`` folder with ``.metadata``, or DeepSpeed's
  ``latest`` tag folder. HF's ``get_last_checkpoint`` takes the highest number, complete or not
  (transformers#35782).
* ``lightning``: ``*.ckpt`` directly in the directory. Complete = a whole zip archive (what
  ``torch.save`` writes; a partly written file has no end record), or for a sharded FSDP save (a
  ``.ckpt`` folder) DCP's ``.metadata`` plus a whole ``meta.pt``. The step comes from ``step=N``
  in the name; ``last.ckpt`` takes the step of the newest complete numbered file and sorts after
  it, so that it is the one chosen.
* ``accelerate``: Accelerate's ``save_state`` folders as transformers' no-trainer examples name them,
  ``step_N`` and ``epoch_N``, and ``checkpoint_N`` from ``ProjectConfiguration``'s automatic naming
  (in ``checkpoints/`` under the directory, or the directory itself). Complete = model weights
  (``model*.safetensors`` whole by its header, ``pytorch_model*.bin`` a whole zip, or a sharded
  ``pytorch_model_fsdp_K/`` with ``.metadata``), the optimizer state (``optimizer*.bin`` a whole zip,
  or ``optimizer_K/`` with ``.metadata``) and ``random_states_R.pkl`` for ranks 0..R with no gap, each a
  whole zip. Only ``step_N`` tells the step; ``epoch_N`` and ``checkpoint_N`` (a count of saves) are
  ordered by N with the step unknown.
* ``file``: one file per checkpoint, named by ``checkpoint.file`` (nanoGPT's ``out/ckpt.pt``);
  see :mod:`fsdp_orch.checkpoints.single_file`.

The functions take a small storage protocol so the supervisor can ask the same question of a
remote filesystem; ``LocalStorage`` is the default. Only :func:`move_aside` changes anything.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

COMMIT_FILE = "COMMITTED"
METADATA_FILE = ".metadata"
HF_COMPLETE_FILE = "trainer_state.json"
LIGHTNING_SHARDED_META = "meta.pt"
INCOMPLETE_DIR = ".fsdp-orch-incomplete"

DCP = "dcp"
DCP_PLAIN = "dcp-plain"
HF = "hf"
LIGHTNING = "lightning"
FILE = "file"
ACCELERATE = "accelerate"

STEP_DIR = re.compile(r"step-(\d+)")
HF_DIR = re.compile(r"checkpoint-(\d+)")
RANK_STATE = re.compile(r"rank-\d+\.state\.pt")
LIGHTNING_STEP = re.compile(r"step=(\d+)")
GLOB_MAGIC = re.compile(r"[*?\[]")
ACCELERATE_DIR = re.compile(r"(step|epoch|checkpoint)_(\d+)")
ACCELERATE_AUTOMATIC_DIR = "checkpoints"  # ProjectConfiguration(automatic_checkpoint_naming=True)
ACCELERATE_OPTIMIZER_FILE = re.compile(r"optimizer(?:_\d+)?(?:_rank\d+)?\.bin")
ACCELERATE_OPTIMIZER_DIR = re.compile(r"optimizer_\d+")
ACCELERATE_RNG = re.compile(r"random_states_(\d+)\.pkl")
ACCELERATE_UNKNOWN_STEP = {"epoch": "an epoch_N folder names the epoch, not the step",
                           "checkpoint": "Accelerate's automatic checkpoint_N counts saves, not steps"}
LIGHTNING_LAST = re.compile(r"last(?:-v(\d+))?\.ckpt")

# The Trainer's model.safetensors, pytorch_model.bin, adapter_model.*; Accelerate's save_state
# adds model_1.safetensors, and under FSDP pytorch_model_fsdp.bin (full) or ..._rank0.bin (local).
HF_WEIGHT_FILE = re.compile(r"(?:model|pytorch_model|adapter_model)(?:_\d+)?\.(?:safetensors|bin)"
                            r"|pytorch_model_fsdp(?:_\d+)?(?:_rank\d+)?\.bin")
HF_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
HF_FSDP_MODEL = re.compile(r"pytorch_model_fsdp_\d+")
DEEPSPEED_LATEST = "latest"

ZIP_END = b"PK\x05\x06"
ZIP64_LOCATOR = b"PK\x06\x07"
ZIP64_END = b"PK\x06\x06"
ZIP_END_SIZE, ZIP64_LOCATOR_SIZE, ZIP64_END_SIZE = 22, 20, 56
ZIP_MAX_TAIL = ZIP_END_SIZE + 0xFFFF + ZIP64_LOCATOR_SIZE + ZIP64_END_SIZE


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

    def size(self, path: str) -> int | None:
        """The file's size in bytes, or None when it cannot be read."""
        ...

    def read_tail(self, path: str, nbytes: int) -> bytes | None:
        """The file's last ``nbytes`` bytes (all of it when shorter), or None."""
        ...

    # Optional (checkpoint_files reads a pickle's step through it where a storage has it):
    # def read_range(self, path: str, offset: int, nbytes: int) -> bytes | None

    def move(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` (which must not exist), making ``dst``'s folder first."""
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
        return os.path.lexists(path)

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError):
            return None

    def size(self, path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except OSError:
            return None

    def read_tail(self, path: str, nbytes: int) -> bytes | None:
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - nbytes))
                return f.read(nbytes)
        except OSError:
            return None

    def read_range(self, path: str, offset: int, nbytes: int) -> bytes | None:
        """``nbytes`` bytes from ``offset`` (fewer at the end), or None."""
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read(nbytes)
        except OSError:
            return None

    def move(self, src: str, dst: str) -> None:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(src, dst)


LOCAL = LocalStorage()


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    complete: bool
    layout: str  # DCP, DCP_PLAIN, HF, LIGHTNING, ACCELERATE or FILE
    reason: str = ""  # why it is not complete; "" when it is
    step_known: bool = True  # False: a FILE checkpoint whose step neither name nor content tells (step 0)
    step_note: str = ""  # why the step is not known


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


def zip_tail_complete(tail: bytes, size: int) -> bool:
    """Whether ``tail``, the last bytes of a ``size``-byte file, ends a whole zip archive: an
    end record at the very end whose central directory ends where the end records begin."""
    base = size - len(tail)
    pos = tail.rfind(ZIP_END)
    while pos >= 0:
        if pos + ZIP_END_SIZE <= len(tail):
            *_, n_total, cd_size, cd_offset, comment = struct.unpack(
                "<4s4H2LH", tail[pos:pos + ZIP_END_SIZE])
            if pos + ZIP_END_SIZE + comment == len(tail):
                return _central_directory_fits(tail, base, pos, n_total, cd_size, cd_offset)
        pos = tail.rfind(ZIP_END, 0, pos)
    return False


def _central_directory_fits(tail: bytes, base: int, pos: int, n_total: int, cd_size: int,
                            cd_offset: int) -> bool:
    locator = pos - ZIP64_LOCATOR_SIZE
    if locator >= 0 and tail[locator:locator + 4] == ZIP64_LOCATOR:
        _, _, record_at, _ = struct.unpack("<4sLQL", tail[locator:pos])
        record = record_at - base
        if record < 0 or record + ZIP64_END_SIZE > locator or tail[record:record + 4] != ZIP64_END:
            return False
        cd_size, cd_offset = struct.unpack("<QQ", tail[record + 40:record + 56])
        return cd_offset + cd_size == record_at
    if n_total == 0xFFFF or 0xFFFFFFFF in (cd_size, cd_offset):
        return False  # zip64 values without the zip64 records
    return cd_offset + cd_size == base + pos


def zip_complete(path: str, storage: Storage) -> bool:
    """Whether the file at ``path`` is a whole zip archive (read from its end only)."""
    size = storage.size(path)
    if size is None:
        return False
    tail = storage.read_tail(path, ZIP_END_SIZE + ZIP64_LOCATOR_SIZE + ZIP64_END_SIZE)
    if tail is not None and tail.startswith(ZIP_END, len(tail) - ZIP_END_SIZE):
        return zip_tail_complete(tail, size)  # no archive comment: the usual case
    tail = storage.read_tail(path, ZIP_MAX_TAIL)
    return tail is not None and zip_tail_complete(tail, size)


def _dcp(path: Path, step: int, storage: Storage) -> CheckpointInfo:
    has_metadata = storage.exists(str(path / METADATA_FILE))
    ours = path.name == step_dir_name(step) or any(
        n == COMMIT_FILE or RANK_STATE.fullmatch(n) for n in storage.list_dir(str(path)))
    if not ours:
        return CheckpointInfo(step, path, has_metadata, DCP_PLAIN,
                              "" if has_metadata else "no .metadata")
    commit = parse_commit(storage.read_text(str(path / COMMIT_FILE)))
    if not has_metadata:
        reason = "no .metadata"
    elif commit is None:
        reason = "no valid COMMITTED record"
    elif commit["step"] != step:
        reason = f"COMMITTED names step {commit['step']}"
    else:
        reason = ""
    return CheckpointInfo(step, path, not reason, DCP, reason)


def _hf_weights_missing(path: Path, names: list[str], storage: Storage) -> str:
    """Why the model weights of an HF checkpoint folder are not all there ("" when they are)."""
    if any(HF_WEIGHT_FILE.fullmatch(n) for n in names):
        return ""
    for name in names:
        if HF_FSDP_MODEL.fullmatch(name) and storage.exists(str(path / name / METADATA_FILE)):
            return ""
    latest = storage.read_text(str(path / DEEPSPEED_LATEST))
    if latest and latest.strip() and storage.is_dir(str(path / latest.strip())):
        return ""  # a DeepSpeed engine checkpoint (ZeRO-3 without gathered weights)
    for index in HF_WEIGHT_INDEXES:
        if index in names:
            shards = _index_shards(storage.read_text(str(path / index)))
            if shards is None:
                return f"{index} has no weight_map"
            missing = sorted(s for s in shards if not storage.exists(str(path / s)))
            return f"{index} names missing shard {missing[0]}" if missing else ""
    return "no model weights"


def _index_shards(text: str | None) -> set[str] | None:
    try:
        weight_map = json.loads(text or "").get("weight_map")
    except (ValueError, AttributeError):
        return None
    if not isinstance(weight_map, dict) or not weight_map:
        return None
    return {str(v) for v in weight_map.values()}


def _hf(path: Path, step: int, storage: Storage) -> CheckpointInfo:
    text = storage.read_text(str(path / HF_COMPLETE_FILE))
    if text is None:
        if not _accelerate_missing(path, storage.list_dir(str(path)), storage):
            return CheckpointInfo(step, path, True, ACCELERATE)  # a save_state folder named the Trainer's way
        return CheckpointInfo(step, path, False, HF, f"no {HF_COMPLETE_FILE}")
    try:
        state = json.loads(text)
    except ValueError:
        state = None
    if not isinstance(state, dict):
        return CheckpointInfo(step, path, False, HF, f"{HF_COMPLETE_FILE} is not a JSON object")
    reason = _hf_weights_missing(path, storage.list_dir(str(path)), storage)
    return CheckpointInfo(step, path, not reason, HF, reason)


def _lightning(path: Path, step: int, storage: Storage) -> CheckpointInfo:
    if storage.is_dir(str(path)):
        if not storage.exists(str(path / METADATA_FILE)):
            reason = "no .metadata"
        elif not zip_complete(str(path / LIGHTNING_SHARDED_META), storage):
            reason = f"no complete {LIGHTNING_SHARDED_META}"
        else:
            reason = ""
    else:
        reason = "" if zip_complete(str(path), storage) else "not a complete zip archive"
    return CheckpointInfo(step, path, not reason, LIGHTNING, reason)


def _safetensors_complete(path: str, storage: Storage) -> bool:
    """A safetensors file is whole when its size is 8 + the header's length + the end of its last
    tensor (read from its start; a storage that cannot read a range is taken at its word)."""
    size = storage.size(path)
    read_range = getattr(storage, "read_range", None)
    if size is None or size < 8:
        return False
    if read_range is None:
        return True
    head = read_range(path, 0, 8)
    if head is None or len(head) < 8:
        return False
    length = struct.unpack("<Q", head)[0]
    if 8 + length > size:
        return False
    try:
        header = json.loads(read_range(path, 8, length) or b"")
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return False
    return size == 8 + length + max(ends, default=0)


def _file_problem(path: Path, name: str, storage: Storage) -> str:
    """Why a file Accelerate wrote is cut short ("" when whole): safetensors by its header, the rest
    (torch.save's) as zip archives."""
    full = str(path / name)
    whole = _safetensors_complete(full, storage) if name.endswith(".safetensors") else zip_complete(full, storage)
    return "" if whole else f"{name} is cut short"


def _accelerate_missing(path: Path, names: list[str], storage: Storage) -> str:
    """Why an Accelerate ``save_state`` folder is not complete ("" when it is)."""
    parts = (("model weights", HF_WEIGHT_FILE, HF_FSDP_MODEL), ("optimizer state", ACCELERATE_OPTIMIZER_FILE,
                                                                ACCELERATE_OPTIMIZER_DIR))
    for what, file_name, sharded_dir in parts:
        files = [n for n in names if file_name.fullmatch(n)]
        dirs = [n for n in names if sharded_dir.fullmatch(n) and storage.is_dir(str(path / n))]
        if not files and not dirs:
            return f"no {what}"
        for name in files:
            if problem := _file_problem(path, name, storage):
                return problem
        for name in dirs:
            if not storage.exists(str(path / name / METADATA_FILE)):
                return f"{name}/ has no .metadata"
    ranks = sorted(int(m.group(1)) for n in names if (m := ACCELERATE_RNG.fullmatch(n)))
    if ranks != list(range(len(ranks))) or not ranks:
        missing = next(r for r in range(len(ranks) + 1) if r not in ranks)
        return f"no random_states_{missing}.pkl"
    for rank in ranks:
        if problem := _file_problem(path, f"random_states_{rank}.pkl", storage):
            return problem
    return ""


def _accelerate(path: Path, kind: str, number: int, storage: Storage) -> CheckpointInfo:
    reason = _accelerate_missing(path, storage.list_dir(str(path)), storage)
    note = ACCELERATE_UNKNOWN_STEP.get(kind, "")
    return CheckpointInfo(number, path, not reason, ACCELERATE, reason, step_known=not note, step_note=note)


def _last_version(name: str) -> int:
    """0 for checkpoints that are not Lightning's ``last``; 1 for ``last.ckpt``, 2 for -v1..."""
    match = LIGHTNING_LAST.fullmatch(name)
    return 0 if match is None else 1 + int(match.group(1) or 0)


def _newest_numbered_step(infos: Iterable[CheckpointInfo]) -> int:
    """The step ``last.ckpt`` stands for: the newest complete numbered ``.ckpt`` (else any)."""
    numbered = [c for c in infos if c.layout == LIGHTNING and not _last_version(c.path.name)]
    complete = [c.step for c in numbered if c.complete]
    return max(complete or [c.step for c in numbered] or [0])


def _order(info: CheckpointInfo) -> tuple[int, int, bool, str]:
    return info.step, _last_version(info.path.name), not info.complete, info.path.name


def _scan(base: str, storage: Storage, only: str | None = None) -> list[CheckpointInfo]:
    names = storage.list_dir(base) if only is None else [only]
    found = []
    for name in names:
        full = os.path.join(base, name)
        if match := STEP_DIR.fullmatch(name):
            if storage.is_dir(full):
                found.append(_dcp(Path(full), int(match.group(1)), storage))
        elif match := HF_DIR.fullmatch(name):
            if storage.is_dir(full):
                found.append(_hf(Path(full), int(match.group(1)), storage))
        elif match := ACCELERATE_DIR.fullmatch(name):
            if storage.is_dir(full):
                found.append(_accelerate(Path(full), match.group(1), int(match.group(2)), storage))
        elif name == ACCELERATE_AUTOMATIC_DIR and only is None and storage.is_dir(full):
            found += [c for c in _scan(full, storage) if c.layout == ACCELERATE]
        elif name.endswith(".ckpt") and not _last_version(name):
            if match := LIGHTNING_STEP.search(name):
                found.append(_lightning(Path(full), int(match.group(1)), storage))
    lasts = [n for n in names if _last_version(n)]
    if lasts:
        step = _newest_numbered_step(_scan(base, storage) if only is not None else found)
        found += [_lightning(Path(os.path.join(base, n)), step, storage) for n in lasts]
    return sorted(found, key=_order)


def checkpoint_info(path: str | os.PathLike[str], storage: Storage = LOCAL) -> CheckpointInfo | None:
    """Describe one checkpoint (folder or Lightning file); None when its name is not one."""
    path = Path(os.path.expanduser(os.fspath(path)))
    name = path.name
    if match := STEP_DIR.fullmatch(name):
        return _dcp(path, int(match.group(1)), storage)
    if match := HF_DIR.fullmatch(name):
        return _hf(path, int(match.group(1)), storage)
    found = _scan(str(path.parent), storage, only=name)
    return found[0] if found else None


def is_pattern(directory: str) -> bool:
    """Whether ``checkpoint.dir`` is a glob (``lightning_logs/version_*/checkpoints``)."""
    return GLOB_MAGIC.search(directory) is not None


def matching_dirs(pattern: str, storage: Storage = LOCAL) -> list[str]:
    """The folders a glob matches, found one path segment at a time through ``storage`` (so over
    SFTP too); hidden names (fsdp-orch's own ``.fsdp-orch-*``) are not matched by a wildcard."""
    found = [os.sep if pattern.startswith(os.sep) else ""]
    for part in [p for p in pattern.split(os.sep) if p]:
        if not is_pattern(part):
            found = [os.path.join(base, part) for base in found]
            continue
        found = [os.path.join(base, name) for base in found for name in sorted(storage.list_dir(base or "."))
                 if not name.startswith(".") and fnmatch.fnmatchcase(name, part)]
    return [path for path in found if storage.is_dir(path)]


def list_checkpoints(directory: str | os.PathLike[str], storage: Storage = LOCAL) -> list[CheckpointInfo]:
    """Every checkpoint in ``directory``, oldest step first (at one step: Lightning's ``last``
    after numbered files, complete before partial). A glob takes every folder it matches, so a
    folder that moves with every run (Lightning's ``version_N``) is followed to the newest step."""
    expanded = os.path.expanduser(os.fspath(directory))
    if not is_pattern(expanded):
        return _scan(expanded, storage)
    return sorted((c for folder in matching_dirs(expanded, storage) for c in _scan(folder, storage)), key=_order)


def latest_complete(directory: str | os.PathLike[str], storage: Storage = LOCAL) -> CheckpointInfo | None:
    """The complete checkpoint with the highest step, or None."""
    complete = [c for c in list_checkpoints(directory, storage) if c.complete]
    return complete[-1] if complete else None


def partial_newer_than_latest(directory: str | os.PathLike[str],
                              storage: Storage = LOCAL) -> list[CheckpointInfo]:
    """The partial checkpoints with a step above the latest complete one's (all partial ones
    when none is complete): what a script that takes the highest number would wrongly resume."""
    found = list_checkpoints(directory, storage)
    complete = [c for c in found if c.complete]
    newest = complete[-1].step if complete else -1
    return [c for c in found if not c.complete and c.step > newest]


def move_aside(infos: Iterable[CheckpointInfo], directory: str | os.PathLike[str],
               tag: str, storage: Storage = LOCAL, into: str = INCOMPLETE_DIR) -> list[tuple[Path, Path]]:
    """Rename each checkpoint to ``<directory>/<into>/<name>.<tag>`` (``-1``, ``-2``... when taken;
    ``into`` is ``.fsdp-orch-incomplete`` by default); returns (from, to) pairs. Nothing is deleted.
    A dot-folder, because a sibling like ``checkpoint-30.partial`` still matches HF's rotation glob
    ``checkpoint-*``."""
    if not tag or os.sep in tag:
        raise ValueError(f"move_aside: tag must be a plain name, got {tag!r}")
    folder = os.path.expanduser(os.fspath(directory))
    moved = []
    for info in infos:
        # a glob's checkpoints are kept beside where each was found
        target_dir = (info.path.parent if is_pattern(folder) else Path(folder)) / into
        target = target_dir / f"{info.path.name}.{tag}"
        n = 0
        while storage.exists(str(target)):
            n += 1
            target = target_dir / f"{info.path.name}.{tag}-{n}"
        storage.move(str(info.path), str(target))
        moved.append((info.path, target))
    return moved


__all__ = ["CheckpointInfo", "LocalStorage", "Storage", "checkpoint_info", "latest_complete",
           "list_checkpoints", "move_aside", "parse_commit", "partial_newer_than_latest",
           "step_dir_name", "zip_tail_complete", "COMMIT_FILE", "DCP", "DCP_PLAIN", "HF",
           "ACCELERATE", "FILE", "INCOMPLETE_DIR", "LIGHTNING", "METADATA_FILE", "is_pattern", "matching_dirs", "zip_complete"]
