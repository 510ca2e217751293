"""What checkpoint discovery needs from a filesystem, as a protocol: the supervisor asks the same
questions of a remote filesystem (over SFTP) as of its own. ``LOCAL`` is the default; only
``move`` changes anything."""

from __future__ import annotations

import os
from typing import Protocol


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

    # Optional (a pickle's step and a safetensors header are read through it where a storage has
    # it; see read_at): def read_range(self, path: str, offset: int, nbytes: int) -> bytes | None

    def move(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` (which must not exist), making ``dst``'s folder first."""
        ...

    def folder_problem(self, folder: str) -> str | None:
        """Why nothing may be loaded from ``folder`` there (places.trust: not the caller's or
        root's, or others can write it or a folder above it), or None when it may."""
        ...


class LocalStorage:
    """This machine's filesystem."""

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

    def folder_problem(self, folder: str) -> str | None:
        from fsdp_orch.places.trust import local_folder_problem

        return local_folder_problem(folder)


LOCAL = LocalStorage()


def read_at(storage: Storage, path: str, offset: int, nbytes: int) -> bytes | None:
    """``nbytes`` bytes of the file from ``offset``; None where the storage cannot read a range."""
    read_range = getattr(storage, "read_range", None)
    return read_range(path, offset, nbytes) if read_range is not None else None


__all__ = ["LOCAL", "LocalStorage", "Storage", "read_at"]
