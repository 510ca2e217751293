"""Whether a file that a framework writes is whole, read without torch and mostly from one end:
a zip archive (what ``torch.save`` writes) from its end records, a safetensors file from its
header, a plain pickle from its first two bytes and its last. A file cut short by a crash or still
being written fails these; nothing here reads a whole file."""

from __future__ import annotations

import json
import struct

from fsdp_orch.checkpoints.storage import Storage

ZIP_END = b"PK\x05\x06"
ZIP64_LOCATOR = b"PK\x06\x07"
ZIP64_END = b"PK\x06\x06"
ZIP_END_SIZE, ZIP64_LOCATOR_SIZE, ZIP64_END_SIZE = 22, 20, 56
ZIP_MAX_TAIL = ZIP_END_SIZE + 0xFFFF + ZIP64_LOCATOR_SIZE + ZIP64_END_SIZE


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


def safetensors_complete(path: str, storage: Storage) -> bool:
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


def pickle_whole(head: bytes, tail: bytes) -> bool:
    """A plain pickle: a protocol 2-5 header and the STOP opcode as its last byte."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5 and tail.endswith(b".")


__all__ = ["pickle_whole", "safetensors_complete", "zip_complete", "zip_tail_complete"]
