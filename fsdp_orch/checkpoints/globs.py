"""``checkpoint.dir`` and ``checkpoint.file`` as globs (Lightning's ``version_*/checkpoints``):
what is a pattern, the folders one matches, and the fixed folder above its first wildcard."""

from __future__ import annotations

import fnmatch
import os
import re

from fsdp_orch.checkpoints.storage import LOCAL, Storage

WILDCARDS = re.compile(r"[*?\[]")


def is_pattern(directory: str) -> bool:
    """Whether ``checkpoint.dir`` is a glob (``lightning_logs/version_*/checkpoints``)."""
    return WILDCARDS.search(directory) is not None


def matching_dirs(pattern: str, storage: Storage = LOCAL) -> list[str]:
    """The folders a glob matches, found one path segment at a time through ``storage`` (so over
    SFTP too); hidden names (fsdp-orch's own ``.fsdp-orch-*``) are not matched by a wildcard."""
    found = [os.sep if pattern.startswith(os.sep) else ""]
    for part in [p for p in pattern.split(os.sep) if p]:
        if not is_pattern(part):
            found = [os.path.join(base, part) for base in found]
            continue
        found = [os.path.join(base, name) for base in found
                 for name in sorted(storage.list_dir(base or "."))
                 if not name.startswith(".") and fnmatch.fnmatchcase(name, part)]
    return [path for path in found if storage.is_dir(path)]


def fixed_folder(pattern: str) -> str:
    """The deepest folder of ``pattern`` with no wildcard: the layout's checkpoint folder (where
    what is moved aside goes)."""
    fixed = []
    for part in pattern.split("/")[:-1]:
        if WILDCARDS.search(part):
            break
        fixed.append(part)
    return "/".join(fixed) or ("/" if pattern.startswith("/") else ".")


__all__ = ["WILDCARDS", "fixed_folder", "is_pattern", "matching_dirs"]
