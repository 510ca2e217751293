"""The full ``status --json`` list kept in a file named after the store's generation (bumped on
every change of a status document), so that ``status`` in a polling pipeline reads one file when
nothing changed; and the documents of the jobs stalled at the time of reading put into it. Stdlib
only: ``status`` starts here."""

from __future__ import annotations

import os


class ListingCache:
    """``<folder>/status-<generation>.json``; only the newest generation's file is kept."""

    def __init__(self, folder: str):
        self.folder = folder

    def _path(self, generation: int) -> str:
        return os.path.join(self.folder, f"status-{generation}.json")

    def read(self, generation: int) -> bytes | None:
        try:
            with open(self._path(generation), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write(self, generation: int, data: bytes) -> None:
        from fsdp_orch.places.private import make_private_dirs, write_private

        path = self._path(generation)
        try:
            make_private_dirs(self.folder)
            write_private(path, data)
            keep = os.path.basename(path)
            for name in os.listdir(self.folder):
                if name.startswith("status-") and name != keep and not name.endswith(".tmp"):
                    try:
                        os.unlink(os.path.join(self.folder, name))
                    except FileNotFoundError:
                        pass
        except OSError:
            pass  # a cache that cannot be written only costs speed


def with_docs(listing: bytes, replacements: list[tuple[bytes, bytes]]) -> bytes:
    """``listing`` with each (kept document, document as read now) put in (each document holds its
    job's id, so it is found once)."""
    found = sorted((at, kept, now) for kept, now in replacements
                   if (at := listing.rfind(kept)) >= 0)
    if not found:
        return listing
    view, done = memoryview(listing), 0
    parts: list[bytes | memoryview] = []
    for at, kept, now in found:  # one copy of the megabytes, not one per document
        parts += [view[done:at], now]
        done = at + len(kept)
    parts.append(view[done:])
    return b"".join(parts)
