"""The single-file checkpoint layout (``checkpoint.file``: nanoGPT's ``out/ckpt.pt``,
``ckpt-*.pt``, ``model_{step}.pt``). Torch-free, behind the same ``Storage`` as the folder layouts.

* A file is **whole** when it is a whole zip archive (``torch.save``'s format: an end record whose
  central directory ends where it begins), a whole legacy ``torch.save`` file
  (``_use_new_zipfile_serialization=False``: five pickles, then every storage's bytes, which must
  add up to the file's size), or a whole plain pickle (a protocol header, ending with STOP).
* It is **complete** when it is whole and its size did not change between two looks (the caller
  passes the first look's sizes, or :func:`looked_twice` takes them with an injected sleep).
* Its **step** comes from its name (``{step}`` in the pattern, or a ``*`` that matched only
  digits), else from ``step_key`` read out of the pickle by an unpickler that never runs a global
  (every class is a stand-in), else it is unknown: ``CheckpointInfo.step_known`` is False.
"""

from __future__ import annotations

import fnmatch
import io
import os
import pickle
import pickletools
import posixpath
import re
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fsdp_orch.checkpoints.formats import zip_complete
from fsdp_orch.checkpoints.info import FILE, CheckpointInfo
from fsdp_orch.checkpoints.storage import Storage

STEP_PLACEHOLDER = "{step}"
SETTLE_S = 0.5  # the pause between the two looks at a file's size
MAX_PICKLE_BYTES = 64 << 20  # the most read to find step_key (a state dict's pickle is small)
PROBE_BYTES = 64 << 10  # the first read of a file's start (read on, up to the most, where needed)
LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."  # torch's pickled MAGIC_NUMBER
WILDCARDS = re.compile(r"[*?\[]")
OWN_DIRS = ".fsdp-orch-"  # INCOMPLETE_DIR, and submit --fresh's .fsdp-orch-previous
# Element sizes of the storage classes a legacy torch.save names (torch.FloatStorage, ...).
_ELEMENT_SIZE = {"Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
                 "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "Untyped": 1,
                 "QInt8": 1, "QUInt8": 1, "QInt32": 4, "QUInt4x2": 1, "QUInt2x4": 1}
# Where the folder holds files that are checkpoints to a script but no layout of ours.
CHECKPOINT_LIKE = (".pt", ".pth", ".ckpt", ".bin", ".pkl", ".pickle", ".tar", ".safetensors")


@dataclass(frozen=True)
class FileLayout:
    """``pattern``: an absolute path whose parts may hold ``*``/``?``/``[...]``, and whose file name
    may hold ``{step}`` (the step's digits). ``step_key``: the int under this key of the saved dict."""

    pattern: str
    step_key: str | None = None

    @property
    def folder(self) -> str:
        return fixed_folder(self.pattern)


def fixed_folder(pattern: str) -> str:
    """The deepest folder of ``pattern`` with no wildcard: the layout's checkpoint folder (where
    what is moved aside goes)."""
    fixed = []
    for part in pattern.split("/")[:-1]:
        if WILDCARDS.search(part):
            break
        fixed.append(part)
    return "/".join(fixed) or ("/" if pattern.startswith("/") else ".")


def name_regex(name_pattern: str) -> re.Pattern[str]:
    """The file-name pattern as a regex; ``{step}`` is group ``step``, each wildcard a group ``wN``."""
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
    """The step a file's name tells: ``{step}``'s digits, else a wildcard that matched only digits."""
    match = name_regex(name_pattern).fullmatch(name)
    if match is None:
        return None
    if STEP_PLACEHOLDER in name_pattern:
        return int(match.group("step"))
    digits = [v for k, v in match.groupdict().items() if k.startswith("w") and v.isdigit()]
    return int(digits[-1]) if len(digits) == 1 else None


def matching_files(layout: FileLayout, storage: Storage) -> list[str]:
    """The files ``layout.pattern`` names, sorted (never inside a folder fsdp-orch moved them to)."""
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


# --- is it whole? -----------------------------------------------------------------------------

def pickle_whole(head: bytes, tail: bytes) -> bool:
    """A plain pickle: a protocol 2-5 header and the STOP opcode as its last byte."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5 and tail.endswith(b".")


class _Stub:
    """What every global of a checkpoint's pickle becomes: accepts any call, state and items."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Stub:
        return _Stub()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


class _SafeUnpickler(pickle.Unpickler):
    """Builds the plain containers and numbers of a pickle; never imports or runs a global."""

    def __init__(self, file: Any):
        super().__init__(file)
        self.storages: dict[str, tuple[str, int]] = {}  # legacy torch.save: key -> (class, numel)
        self._classes: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> Any:
        key = f"{module}.{name}"
        if key not in self._classes:
            self._classes[key] = type(name, (_Stub,), {"qualname": key})
        return self._classes[key]

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
            kind = getattr(pid[1], "qualname", "")
            numel = pid[4]
            if isinstance(numel, int):
                self.storages[str(pid[2])] = (kind, numel)  # tensors sharing a storage name it again
        return _Stub()


def safe_load(data: bytes) -> tuple[Any, dict[str, tuple[str, int]]]:
    """The object a pickle holds, with stand-ins for every class, and the storages it names."""
    reader = _SafeUnpickler(io.BytesIO(data))
    return reader.load(), reader.storages


def int_under(obj: Any, key: str) -> int | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def legacy_layout(head: bytes) -> tuple[int, Any] | None:
    """A legacy ``torch.save`` file's head: (the size the whole file must have, the saved object),
    or None when ``head`` does not hold its five pickles. The storages follow the last pickle,
    each as an 8-byte element count and the elements, in the order of the pickled key list."""
    stream = io.BytesIO(head)
    ends = []
    try:
        for _ in range(5):
            for _ in pickletools.genops(stream):
                pass
            ends.append(stream.tell())
        obj, storages = safe_load(head[ends[2]:ends[3]])
        keys, _ = safe_load(head[ends[3]:ends[4]])  # a list of str (never a global run either)
    except Exception:
        return None
    if not isinstance(keys, list) or any(str(k) not in storages for k in keys):
        return None
    total = ends[4]
    for key in keys:
        kind, numel = storages[str(key)]
        total += 8 + numel * _ELEMENT_SIZE.get(kind.rsplit(".", 1)[-1].removesuffix("Storage"), 1)
    return total, obj


def _read_at(storage: Storage, path: str, offset: int, nbytes: int) -> bytes | None:
    read_range = getattr(storage, "read_range", None)
    return read_range(path, offset, nbytes) if read_range is not None else None


class _RangeFile(io.RawIOBase):
    """A read-only seekable file over ``Storage.read_range`` (zipfile reads the directory and one entry)."""

    def __init__(self, storage: Storage, path: str, size: int):
        self.storage, self.path, self.length, self.pos = storage, path, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: 0, 1: self.pos, 2: self.length}[whence] + offset
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.length - self.pos if n is None or n < 0 else n
        data = _read_at(self.storage, self.path, self.pos, n) or b""
        self.pos += len(data)
        return data


def _zip_pickle(storage: Storage, path: str, size: int) -> bytes | None:
    """The ``*/data.pkl`` entry of a torch.save zip archive, or None."""
    try:
        with zipfile.ZipFile(_RangeFile(storage, path, size)) as archive:
            entries = [i for i in archive.infolist() if i.filename.endswith("/data.pkl")
                       or i.filename == "data.pkl"]
            if not entries or entries[0].file_size > MAX_PICKLE_BYTES:
                return None
            return archive.read(entries[0])
    except (OSError, zipfile.BadZipFile, ValueError, KeyError, EOFError):
        return None


@dataclass(frozen=True)
class _Whole:
    whole: bool
    reason: str
    obj: Any = None  # the saved object (stand-ins for classes) when it was read


def whole_file(path: str, storage: Storage, want_object: bool) -> _Whole:
    """Whether the file is a whole zip, legacy torch.save file or plain pickle; with
    ``want_object``, the saved object too where the storage can read a range of it."""
    size = storage.size(path)
    if size is None:
        return _Whole(False, "cannot be read")
    if zip_complete(path, storage):
        data = _zip_pickle(storage, path, size) if want_object else None
        return _Whole(True, "", _load(data))
    probe = min(size, PROBE_BYTES)
    head = _read_at(storage, path, 0, probe)
    if head is None:
        head = storage.read_tail(path, size) if size <= probe else None  # a small file: all of it
    if head is None:
        return _Whole(False, "not a complete zip archive (the storage cannot read the start of a pickle)")
    if head.startswith(LEGACY_MAGIC):
        legacy = legacy_layout(head)
        while legacy is None and len(head) < min(size, MAX_PICKLE_BYTES):  # longer pickles: read on
            head = _read_at(storage, path, 0, min(size, MAX_PICKLE_BYTES, len(head) * 16)) or head
            legacy = legacy_layout(head)
        if legacy is None:
            return _Whole(False, "a legacy torch.save file whose pickles are cut off")
        if legacy[0] != size:
            return _Whole(False, f"a legacy torch.save file of {size} bytes; its storages need {legacy[0]}")
        return _Whole(True, "", legacy[1])
    tail = storage.read_tail(path, 1) or b""
    if not pickle_whole(head, tail):
        return _Whole(False, "not a complete zip archive or pickle")
    if want_object and len(head) < size <= MAX_PICKLE_BYTES:
        head = _read_at(storage, path, 0, size) or head
    return _Whole(True, "", _load(head) if want_object and len(head) == size else None)


def _load(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return safe_load(data)[0]
    except Exception:
        return None


# --- the layout ---------------------------------------------------------------------------------

def file_sizes(layout: FileLayout, storage: Storage) -> dict[str, int]:
    """The first look: every matching file's size."""
    sizes = {}
    for path in matching_files(layout, storage):
        size = storage.size(path)
        if size is not None:
            sizes[path] = size
    return sizes


def describe_file(path: str, layout: FileLayout, storage: Storage, first_size: int | None) -> CheckpointInfo:
    """One file of the layout, looked at a second time (``first_size``: its size at the first look)."""
    name_step = step_from_name(layout.pattern.rsplit("/", 1)[-1], posixpath.basename(path))
    need_key = name_step is None and layout.step_key is not None
    whole = whole_file(path, storage, want_object=need_key)
    size = storage.size(path)
    if not whole.whole:
        reason = whole.reason
    elif first_size is None or size != first_size:
        reason = f"its size changed between two looks ({first_size} then {size} bytes): still being written"
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


def list_files(layout: FileLayout, storage: Storage, first_look: Mapping[str, int]) -> list[CheckpointInfo]:
    """Every file of the layout, oldest first: by step where known (before any of unknown step,
    whose order is by name), complete before partial at one step."""
    found = [describe_file(p, layout, storage, first_look.get(p)) for p in matching_files(layout, storage)]
    return sorted(found, key=lambda c: (c.step_known, c.step, not c.complete, str(c.path)))


def looked_twice(layout: FileLayout, storage: Storage, sleep: Callable[[float], None],
                 settle_s: float = SETTLE_S) -> list[CheckpointInfo]:
    """:func:`list_files` with the first look taken ``settle_s`` before (by the injected ``sleep``);
    no pause when nothing matches."""
    first = file_sizes(layout, storage)
    if first:
        sleep(settle_s)
    return list_files(layout, storage, first)


def fingerprint(path: str, storage: Storage) -> tuple[int | None, bytes | None]:
    """What tells two saves of one file apart without a step: its size and its last KiB (a zip's
    central directory holds every entry's CRC, torch's serialization id among them)."""
    return storage.size(path), storage.read_tail(path, 1024)


def latest_file(found: list[CheckpointInfo]) -> CheckpointInfo | None:
    complete = [c for c in found if c.complete]
    return complete[-1] if complete else None


def stray_files(directory: str, storage: Storage, known: set[str]) -> list[str]:
    """Files directly in a checkpoint folder that a script may have saved as its checkpoint
    (``*.pt``, ``*.pth``, ``*.ckpt``...) but that are none of the checkpoints ``known`` to a layout."""
    return sorted(p for n in storage.list_dir(directory)
                  if n.lower().endswith(CHECKPOINT_LIKE) and (p := os.path.join(directory, n)) not in known
                  and not storage.is_dir(p))


def suggested_setting(path: str, workdir: str) -> str:
    """The ``checkpoint.file`` value that names ``path``, relative to the job's workdir."""
    rel = os.path.relpath(path, workdir)
    return rel if not rel.startswith("..") else path


__all__ = ["CHECKPOINT_LIKE", "FileLayout", "fingerprint", "fixed_folder", "SETTLE_S", "describe_file", "file_sizes", "int_under",
           "latest_file", "legacy_layout", "list_files", "looked_twice", "matching_files", "name_regex",
           "pickle_whole", "safe_load", "step_from_name", "stray_files", "suggested_setting", "whole_file"]
