"""What ``torch.save`` (or ``pickle.dump``) wrote, read without torch: whether the file is whole (a
zip archive, a legacy ``torch.save`` file or a plain pickle) and, where asked, the object it holds,
read by an unpickler that never imports or runs a global (every class becomes a stand-in).

A legacy file (``_use_new_zipfile_serialization=False``) is five pickles, then every storage's
bytes, which must add up to the file's size."""

from __future__ import annotations

import io
import pickle
import pickletools
import zipfile
from dataclasses import dataclass
from typing import Any

from fsdp_orch.checkpoints.formats import pickle_whole, zip_complete
from fsdp_orch.checkpoints.storage import Storage, read_at

MAX_PICKLE_BYTES = 64 << 20  # the most read to find step_key (a state dict's pickle is small)
PROBE_BYTES = 64 << 10  # the first read of a file's start (read on, up to the most, where needed)
LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."  # torch's MAGIC_NUMBER
# Element sizes of the storage classes a legacy torch.save names (torch.FloatStorage, ...).
_ELEMENT_SIZE = {"Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4,
                 "Short": 2, "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8,
                 "ComplexDouble": 16, "Untyped": 1, "QInt8": 1, "QUInt8": 1, "QInt32": 4,
                 "QUInt4x2": 1, "QUInt2x4": 1}


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
                self.storages[str(pid[2])] = (kind, numel)  # a shared storage is named again
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
        element = kind.rsplit(".", 1)[-1].removesuffix("Storage")
        total += 8 + numel * _ELEMENT_SIZE.get(element, 1)
    return total, obj


class _RangeFile(io.RawIOBase):
    """A read-only seekable file over ``Storage.read_range`` (zipfile reads the directory and
    one entry)."""

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
        data = read_at(self.storage, self.path, self.pos, n) or b""
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
class Whole:
    whole: bool
    reason: str
    obj: Any = None  # the saved object (stand-ins for classes) when it was read


def whole_file(path: str, storage: Storage, want_object: bool) -> Whole:
    """Whether the file is a whole zip, legacy torch.save file or plain pickle; with
    ``want_object``, the saved object too where the storage can read a range of it."""
    size = storage.size(path)
    if size is None:
        return Whole(False, "cannot be read")
    if zip_complete(path, storage):
        data = _zip_pickle(storage, path, size) if want_object else None
        return Whole(True, "", _load(data))
    probe = min(size, PROBE_BYTES)
    head = read_at(storage, path, 0, probe)
    if head is None:
        head = storage.read_tail(path, size) if size <= probe else None  # a small file: all of it
    if head is None:
        return Whole(False, "not a complete zip archive (the storage cannot read the start of a "
                            "pickle)")
    if head.startswith(LEGACY_MAGIC):
        return _whole_legacy(path, storage, head, size)
    tail = storage.read_tail(path, 1) or b""
    if not pickle_whole(head, tail):
        return Whole(False, "not a complete zip archive or pickle")
    if want_object and len(head) < size <= MAX_PICKLE_BYTES:
        head = read_at(storage, path, 0, size) or head
    return Whole(True, "", _load(head) if want_object and len(head) == size else None)


def _whole_legacy(path: str, storage: Storage, head: bytes, size: int) -> Whole:
    """A legacy torch.save file: its pickles (read on where they are longer than ``head``) and
    storages add up to ``size``."""
    legacy = legacy_layout(head)
    while legacy is None and len(head) < min(size, MAX_PICKLE_BYTES):  # longer pickles: read on
        head = read_at(storage, path, 0, min(size, MAX_PICKLE_BYTES, len(head) * 16)) or head
        legacy = legacy_layout(head)
    if legacy is None:
        return Whole(False, "a legacy torch.save file whose pickles are cut off")
    if legacy[0] != size:
        return Whole(False, f"a legacy torch.save file of {size} bytes; its storages need "
                            f"{legacy[0]}")
    return Whole(True, "", legacy[1])


def _load(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return safe_load(data)[0]
    except Exception:
        return None


__all__ = ["Whole", "int_under", "legacy_layout", "safe_load", "whole_file"]
