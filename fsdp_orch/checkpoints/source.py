"""Where a job's checkpoints are, as one object whatever names them: a folder (``checkpoint.dir``),
a glob of folders, or the files of ``checkpoint.file``. Each source answers the same questions
(every checkpoint, the latest complete one, the partial ones in a script's way, the files a
script may have saved that no layout reads) and moves checkpoints aside, so that resuming and
submitting never ask which kind of source they hold."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fsdp_orch.checkpoints.aside import INCOMPLETE_DIR, move_aside
from fsdp_orch.checkpoints.folders import latest_complete, list_checkpoints, newer_partial
from fsdp_orch.checkpoints.info import CheckpointInfo, latest_of
from fsdp_orch.checkpoints.registry import LAYOUTS, Layout
from fsdp_orch.checkpoints.single_file import (
    FileLayout,
    file_sizes,
    list_files,
    looked_twice,
    stray_files,
)
from fsdp_orch.checkpoints.storage import Storage

Moved = list[tuple[Path, Path]]


class CheckpointSource(Protocol):
    """``folder``: where what is moved aside goes; ``where``: what the job's setting names, in
    messages. ``first_look``: the sizes of an earlier look (:meth:`sizes`), against which a file
    counts as complete only when its size held; None takes this look as both."""

    @property
    def folder(self) -> str: ...

    @property
    def where(self) -> str: ...

    @property
    def storage(self) -> Storage: ...

    def sizes(self) -> dict[str, int]:
        """A first look at the sizes of what may still be written (files; a folder needs none)."""
        ...

    def checkpoints(self, first_look: Mapping[str, int] | None = None) -> list[CheckpointInfo]:
        """Every checkpoint, oldest first."""
        ...

    def latest(self, first_look: Mapping[str, int] | None = None) -> CheckpointInfo | None:
        """The latest complete checkpoint, or None."""
        ...

    def settled(self, sleep: Callable[[float], None]) -> list[CheckpointInfo]:
        """Every checkpoint, looked at long enough to tell one still being written."""
        ...

    def newer_partial(self, found: Sequence[CheckpointInfo]) -> list[CheckpointInfo]:
        """The partial checkpoints of ``found`` that a script's own "latest" would take."""
        ...

    def resumable(self, found: Sequence[CheckpointInfo]) -> CheckpointInfo | None:
        """The latest complete checkpoint once the partial ones of ``found`` are moved aside."""
        ...

    def strays(self) -> list[str]:
        """Files that a script may have saved as its checkpoint but that no layout reads."""
        ...

    def move_aside(self, infos: Iterable[CheckpointInfo], tag: str,
                   into: str = INCOMPLETE_DIR) -> Moved:
        """Each checkpoint renamed into ``<folder>/<into>/`` (see aside.move_aside)."""
        ...


@dataclass(frozen=True)
class FolderSource:
    """``checkpoint.dir``: a folder of checkpoints, or a glob of such folders, in the layouts of
    the registry. A folder's completeness is in its files (a commit record, a whole archive), so
    one look settles it."""

    folder: str
    storage: Storage
    layouts: Sequence[Layout] = LAYOUTS

    @property
    def where(self) -> str:
        return self.folder

    def sizes(self) -> dict[str, int]:
        return {}

    def checkpoints(self, first_look: Mapping[str, int] | None = None) -> list[CheckpointInfo]:
        return list_checkpoints(self.folder, self.storage, self.layouts)

    def latest(self, first_look: Mapping[str, int] | None = None) -> CheckpointInfo | None:
        return latest_complete(self.folder, self.storage, self.layouts)

    def settled(self, sleep: Callable[[float], None]) -> list[CheckpointInfo]:
        return self.checkpoints()

    def newer_partial(self, found: Sequence[CheckpointInfo]) -> list[CheckpointInfo]:
        return newer_partial(found)

    def resumable(self, found: Sequence[CheckpointInfo]) -> CheckpointInfo | None:
        return self.latest()  # looked at again, with what was moved aside gone

    def strays(self) -> list[str]:
        known = {str(c.path) for c in self.checkpoints()}
        return stray_files(self.folder, self.storage, known)

    def move_aside(self, infos: Iterable[CheckpointInfo], tag: str,
                   into: str = INCOMPLETE_DIR) -> Moved:
        return move_aside(infos, self.folder, tag, self.storage, into)


@dataclass(frozen=True)
class FileSource:
    """``checkpoint.file``: the files one pattern names (a single-file layout). A file is complete
    once whole and its size holds between two looks."""

    layout: FileLayout
    folder: str
    storage: Storage

    @property
    def where(self) -> str:
        return self.layout.pattern

    def sizes(self) -> dict[str, int]:
        return file_sizes(self.layout, self.storage)

    def checkpoints(self, first_look: Mapping[str, int] | None = None) -> list[CheckpointInfo]:
        look = self.sizes() if first_look is None else first_look
        return list_files(self.layout, self.storage, look)

    def latest(self, first_look: Mapping[str, int] | None = None) -> CheckpointInfo | None:
        return latest_of(self.checkpoints(first_look))

    def settled(self, sleep: Callable[[float], None]) -> list[CheckpointInfo]:
        return looked_twice(self.layout, self.storage, sleep)

    def newer_partial(self, found: Sequence[CheckpointInfo]) -> list[CheckpointInfo]:
        """Partial files newer than the latest complete one; where a step is unknown, every
        partial one (no number tells which is newer)."""
        newest = latest_of(found)
        return [c for c in found if not c.complete and (
            newest is None or not newest.step_known or not c.step_known or c.step > newest.step)]

    def resumable(self, found: Sequence[CheckpointInfo]) -> CheckpointInfo | None:
        return latest_of(found)  # the settled look stands: another would need another pause

    def strays(self) -> list[str]:
        return []  # the pattern names the job's checkpoints: nothing else is taken for one

    def move_aside(self, infos: Iterable[CheckpointInfo], tag: str,
                   into: str = INCOMPLETE_DIR) -> Moved:
        return move_aside(infos, self.folder, tag, self.storage, into)


def source_of(folder: str, layout: FileLayout | None, storage: Storage) -> CheckpointSource:
    """The files of ``layout`` (``checkpoint.file``) where given, else the checkpoint folder."""
    if layout is not None:
        return FileSource(layout, folder, storage)
    return FolderSource(folder, storage)


__all__ = ["CheckpointSource", "FileSource", "FolderSource", "source_of"]
