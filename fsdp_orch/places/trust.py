"""What decides what runs as you, or what you load, must be yours: sshd's StrictModes rule, for the
cluster profiles, templates and checkpoints fsdp-orch finds on disk. The file must be owned by you
or by root and writable by no one else, and so must every folder above it, up to ``/``. A folder
others can write passes only with its sticky bit set and owned by you or root (``/tmp``): there,
no one else can rename or replace what is yours. The verdict is a pure function of what ``stat``
said; ``load_problem`` does the I/O. Stdlib only."""

from __future__ import annotations

import os
import stat

from fsdp_orch.places.private import OTHERS_WRITE, Seen, _who, user_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

ROOT_UID = 0


def chain_problem(chain: Sequence[Seen], me: int,
                  name: Callable[[int], str] | None = None) -> str | None:
    """Why the first path of ``chain`` must not be loaded, or None when it may: ``chain`` is that
    file, then each folder above it, nearest first, as ``lstat`` saw them. Pure."""
    for place, (path, owner, mode) in enumerate(chain):
        bits = stat.S_IMODE(mode)
        if owner not in (me, ROOT_UID):
            return (f"{path} is owned by {_who(owner, name)} (mode {bits:04o}), "
                    f"not by you ({_who(me, name)}) or root")
        if stat.S_ISLNK(mode):
            continue  # a link's own mode means nothing; its owner is checked, its target too
        sticky_folder = place > 0 and stat.S_ISDIR(mode) and mode & stat.S_ISVTX
        if mode & OTHERS_WRITE and not sticky_folder:
            return f"{path} can be written by others (owner {_who(owner, name)}, mode {bits:04o})"
    return None


def _chain(path: str) -> list[Seen] | str:
    """``path`` and every folder above it as ``lstat`` sees them; a reason when one is missing."""
    chain: list[Seen] = []
    here = os.path.abspath(path)
    while True:
        try:
            st = os.lstat(here)
        except OSError as exc:
            return f"{here} cannot be read ({exc.strerror})"
        chain.append((here, st.st_uid, st.st_mode))
        parent = os.path.dirname(here)
        if parent == here:
            return chain
        here = parent


def load_problem(path: str | os.PathLike[str]) -> str | None:
    """Why the file at ``path`` must not decide what runs as the caller, or None when it may. Both
    the path as given and the one its links lead to follow the rule."""
    me = os.getuid()
    given = os.path.abspath(os.fspath(path))
    for candidate in dict.fromkeys([given, os.path.realpath(given)]):
        chain = _chain(candidate)
        if isinstance(chain, str):
            return chain
        why = chain_problem(chain, me, user_name)
        if why is not None:
            return why
    return None


def refusal(what: str, path: str | os.PathLike[str], why: str, fix: str) -> str:
    """The one line a refused file gets: which file, why (its owner and mode), and what to do."""
    return (f"refused {what} {os.fspath(path)}: {why}; it decides what runs as you, so it must be "
            f"yours (or root's) and writable by no one else, and so must each folder above it: "
            f"{fix}")


__all__ = ["chain_problem", "load_problem", "refusal"]
