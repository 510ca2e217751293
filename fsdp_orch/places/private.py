"""What fsdp-orch makes is private, and what it reads is the caller's own (the rule sshd's
StrictModes applies to ``authorized_keys``). Folders it creates are 0700 and files 0600 whatever the
umask; a run folder, schedule or event file is read only when its owner is the caller and no one
else can write it or the folders above it up to the run root. The verdicts are pure functions of
what ``stat`` said; the rest does the I/O. Stdlib only: ``status`` starts here."""

from __future__ import annotations

import contextlib
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

PRIVATE_UMASK = 0o077
DIR_MODE, FILE_MODE = 0o700, 0o600
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH

# What ``stat`` said of one path: (path, owner uid, st_mode).
Seen = tuple[str, int, int]


def set_private_umask() -> None:
    """For a process of fsdp-orch (the CLI, the supervisor, the notifier): whatever it or a child
    creates is its user's alone."""
    os.umask(PRIVATE_UMASK)


def _who(uid: int, name: Callable[[int], str] | None) -> str:
    return f"uid {uid}" + (f" ({name(uid)})" if name is not None else "")


def trust_problem(chain: Sequence[Seen], me: int,
                  name: Callable[[int], str] | None = None) -> str | None:
    """Why the first path of ``chain`` must not be read, or None when it may: every path in
    ``chain`` (the item, then each folder above it up to and including its run root) must be
    owned by ``me`` and writable by no one else (no group or other write bit). Pure."""
    for path, owner, mode in chain:
        if owner != me:
            return f"{path} is owned by {_who(owner, name)}, not by you ({_who(me, name)})"
        if mode & OTHERS_WRITE:
            return f"{path} can be written by others (mode {stat.S_IMODE(mode):04o})"
    return None


def root_verdict(seen: Seen, me: int,
                 name: Callable[[int], str] | None = None) -> tuple[str, str | None]:
    """What to do with an existing home or run root: ("ok", None), ("tighten", None) for one of
    ours that others can read but not write (made 0700), or
    ("refuse", why and how to fix it). Pure."""
    path, owner, mode = seen
    if not stat.S_ISDIR(mode):
        return "refuse", f"{path} is not a folder; move it aside or point fsdp-orch elsewhere"
    bits = stat.S_IMODE(mode)
    if owner != me:
        return "refuse", (f"{path} is owned by {_who(owner, name)} with mode {bits:04o}, not by "
                          f"you ({_who(me, name)}): fsdp-orch keeps its runs only in folders of "
                          "your own; remove it or choose another folder (then it is created 0700)")
    if mode & OTHERS_WRITE:
        return "refuse", (f"{path} (owner {_who(owner, name)}, mode {bits:04o}) "
                          f"can be written by others; fix: chmod 700 {path}")
    if bits & 0o077:
        return "tighten", None
    return "ok", None


def user_name(uid: int | None = None) -> str:
    """The login name of ``uid`` (default: the caller), or the number when it has none."""
    import pwd

    uid = os.getuid() if uid is None else uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _name_or_none(uid: int) -> str:
    return user_name(uid)


def seen(path: str, follow: bool = False) -> Seen | None:
    """``stat`` of ``path`` (``lstat`` unless ``follow``), or None when it is not there."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    return (path, st.st_uid, st.st_mode)


def untrusted(path: str, up_to: Sequence[str]) -> str | None:
    """Why ``path`` must not be read, or None: ``up_to`` are the folders above it to check (its
    run root and what fsdp-orch made above that), nearest first. A path that is not there is no
    problem (nothing is read from it)."""
    item = seen(path)
    if item is None:
        return None
    if stat.S_ISLNK(item[2]):  # a link's own mode means nothing: it must be ours, and so its target
        if item[1] != os.getuid():
            return trust_problem([item], os.getuid(), _name_or_none)
        item = seen(path, follow=True)
        if item is None:
            return f"{path} is a link to nothing"
    chain = [item]
    for folder in up_to:
        above = seen(folder, follow=True)
        if above is None:
            return f"{folder} is not there"
        chain.append(above)
    return trust_problem(chain, os.getuid(), _name_or_none)


def make_private_dirs(path: str) -> None:
    """``os.makedirs(path)``, each folder it creates 0700 whatever the umask."""
    missing = []
    here = os.path.abspath(path)
    while not os.path.isdir(here):
        missing.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(folder, DIR_MODE)


def make_folder_first(path: str, umask: int) -> bool:
    """Make ``path`` (and the folders above it that are missing) as this user, readable as
    ``umask`` allows and writable by no one else, unless something is there already: in a folder
    others can write, a folder the job will load from is made before another account can make it.
    True when made here; False when something was there (a check of it follows)."""
    target = os.path.abspath(path)
    if os.path.lexists(target):
        return False
    mode = 0o777 & ~(umask | 0o022)
    make_private_dirs(os.path.dirname(target))
    try:
        os.mkdir(target, mode)  # never -p: one made meanwhile is not taken for this user's
    except FileExistsError:
        return False
    os.chmod(target, mode)
    return True


def write_atomically(path: str | os.PathLike[str], data: bytes | str, *, mode: int | None = None,
                     fsync: bool = False, tmp_tag: str = "") -> None:
    """The one way fsdp-orch replaces a whole file: a hidden temporary file beside it, then a
    rename, so that a reader (or a glob of the folder) sees the old content or the new, never half.
    ``mode``: the new file's, whatever the umask (None: as the umask has it); ``fsync`` before the
    rename, for what must outlive a crash (a checkpoint's commit record); ``tmp_tag``: a temporary
    name of its own, for a write made while another of this process's is in flight."""
    target = os.fspath(path)
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{tmp_tag or os.urandom(3).hex()}.tmp")
    # never through a link planted at the temporary name
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as f:  # one os.write may write only part of a large file
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(data.encode() if isinstance(data, str) else data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        # never a copy of what was to be written left behind (a full disk, a target others own)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_private(path: str, data: bytes | str, *, atomic: bool = True) -> None:
    """Write a whole file, created 0600 (through a temporary file and a rename when ``atomic``)."""
    if atomic:
        write_atomically(path, data, mode=FILE_MODE)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def open_private(path: str, flags: int) -> int:
    """``os.open`` that creates the file 0600 (an existing file keeps its mode)."""
    return os.open(path, flags | os.O_CREAT, FILE_MODE)


def ensure_private_root(path: str, above: Sequence[str] = (), create: bool = True) -> None:
    """Make sure ``path`` (a home or a run root) is a folder of the caller's that no one else can
    write or read: create it 0700 (and ``above``, folders fsdp-orch makes over it, nearest first,
    checked the same way), make one of ours that others can read 0700, and refuse one that someone
    else owns or can write with an InputError naming the path, its owner and its mode. With
    ``create`` false a missing folder is left missing (a command that may write nothing)."""
    from fsdp_orch.vocab.errors import InputError

    for folder in [*reversed(above), path]:
        found = seen(folder, follow=True)
        if found is None:
            if create:
                make_private_dirs(folder)
            continue
        verdict, why = root_verdict(found, os.getuid(), _name_or_none)
        if verdict == "refuse":
            raise InputError(why or folder)
        if verdict == "tighten":
            os.chmod(folder, DIR_MODE)


__all__ = ["DIR_MODE", "FILE_MODE", "PRIVATE_UMASK", "Seen", "ensure_private_root",
           "make_private_dirs", "open_private", "root_verdict", "seen", "set_private_umask",
           "trust_problem", "untrusted", "user_name", "write_private"]
