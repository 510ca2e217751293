"""What decides what runs as you, or what you load, must be yours: sshd's StrictModes rule, for the
cluster profiles, templates and checkpoints fsdp-orch finds on disk. The file must be owned by you
or by root and writable by no one else, and so must every folder above it, up to ``/``. A folder
others can write passes only with its sticky bit set and owned by you or root (``/tmp``): there,
no one else can rename or replace what is yours. The verdict is a pure function of what ``stat``
said; ``load_problem`` does the I/O. Stdlib only."""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Sequence

from fsdp_orch.places.private import OTHERS_WRITE, Seen, _who, user_name

ROOT_UID = 0


def chain_problem(chain: Sequence[Seen], me: int, name: Callable[[int], str] | None = None, *,
                  to_be_made: bool = False) -> str | None:
    """Why the first path of ``chain`` must not be loaded, or None when it may: ``chain`` is that
    file, then each folder above it, nearest first, as ``lstat`` saw them. ``to_be_made``: the
    first path is the folder a file will be made in, so a sticky one (``/tmp``) passes there too.
    Pure."""
    for place, (path, owner, mode) in enumerate(chain, start=int(to_be_made)):
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


# What lstat says of a path: (owner uid, st_mode), or None where there is nothing.
Lstat = Callable[[str], "tuple[int, int] | None"]


def _local_lstat(path: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_uid, st.st_mode


def _chain(path: str, lstat: Lstat) -> list[Seen] | str:
    """``path`` and every folder above it as ``lstat`` sees them; a reason when one is missing."""
    chain: list[Seen] = []
    here = path
    while True:
        try:
            seen = lstat(here)
        except OSError as exc:
            return f"{here} cannot be read ({exc.strerror})"
        if seen is None:
            return f"{here} cannot be read (it is not there)"
        chain.append((here, *seen))
        parent = posixpath.dirname(here)
        if parent == here:
            return chain
        here = parent


def path_problem(path: str, lstat: Lstat, me: int, *, name: Callable[[int], str] | None = None,
                 real_path: Callable[[str], str] | None = None,
                 to_be_made: bool = False) -> str | None:
    """Why ``path`` must not decide what runs as ``me``, or None when it may, on any filesystem
    ``lstat`` reads: the path as given (absolute) and the one its links lead to follow the rule."""
    given = posixpath.normpath(path)
    for candidate in dict.fromkeys([given, real_path(given) if real_path else given]):
        chain = _chain(candidate, lstat)
        if isinstance(chain, str):
            return chain
        why = chain_problem(chain, me, name, to_be_made=to_be_made)
        if why is not None:
            return why
    return None


def load_problem(path: str | os.PathLike[str], *, to_be_made: bool = False) -> str | None:
    """Why the file at ``path`` must not decide what runs as the caller, or None when it may. Both
    the path as given and the one its links lead to follow the rule. ``to_be_made``: ``path`` is
    the folder that file will be made in (see ``chain_problem``)."""
    return path_problem(os.path.abspath(os.fspath(path)), _local_lstat, os.getuid(),
                        name=user_name, real_path=os.path.realpath, to_be_made=to_be_made)


def folder_problem(folder: str, lstat: Lstat, me: int, *, name: Callable[[int], str] | None = None,
                   real_path: Callable[[str], str] | None = None) -> str | None:
    """Why a folder fsdp-orch loads from (a checkpoint folder) must not be, or None: where it is not
    made yet, the folder it will be made in, as a folder above it."""
    nearest = posixpath.normpath(folder)
    while lstat(nearest) is None and posixpath.dirname(nearest) != nearest:
        nearest = posixpath.dirname(nearest)
    return path_problem(nearest, lstat, me, name=name, real_path=real_path,
                        to_be_made=nearest != posixpath.normpath(folder))


def local_folder_problem(folder: str | os.PathLike[str]) -> str | None:
    """``folder_problem`` on this machine, as the caller."""
    return folder_problem(os.path.abspath(os.fspath(folder)), _local_lstat, os.getuid(),
                          name=user_name, real_path=os.path.realpath)


class UntrustedFile(PermissionError):
    """A file that decides what runs as you (a pickle a resume unpickles) failed the rule, on the
    open file."""


def opened_file_problem(path: str, owner: int, mode: int, me: int,
                        name: Callable[[int], str] | None = None) -> str | None:
    """Why a file, as ``fstat`` saw it once opened, must not be loaded; None when it may. Pure."""
    if not stat.S_ISREG(mode):
        return f"{path} is not a plain file (mode {stat.S_IMODE(mode):04o})"
    return chain_problem([(path, owner, mode)], me, name)  # the file's own rule, as on its name


def read_trusted(path: str | os.PathLike[str]) -> bytes:
    """The bytes of ``path``, checked on the file opened (no link followed at its last part), not
    on its name: what is read is what was checked. The folders above it are the caller's to have
    checked (a folder closed to others keeps its entries theirs). Raises ``UntrustedFile``."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        why = opened_file_problem(os.fspath(path), st.st_uid, st.st_mode, os.getuid(), user_name)
        if why is not None:
            raise UntrustedFile(f"{why}: a file a resume unpickles must be yours (or root's) "
                                "and writable by no one else")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def refusal(what: str, path: str | os.PathLike[str], why: str, fix: str) -> str:
    """The one line a refused file gets: which file, why (its owner and mode), and what to do."""
    return (f"refused {what} {os.fspath(path)}: {why}; it decides what runs as you, so it must be "
            f"yours (or root's) and writable by no one else, and so must each folder above it: "
            f"{fix}")


__all__ = ["UntrustedFile", "chain_problem", "folder_problem", "load_problem",
           "local_folder_problem", "opened_file_problem", "path_problem", "read_trusted", "refusal"]
