"""Where the index database lives: beside the runs under ``$FSDP_ORCH_HOME``, unless that is on a
network filesystem (NFS, Lustre, GPFS...), where SQLite's locking and WAL are unsafe: then on a
local path of this user and this machine. ``FSDP_ORCH_DB`` names the file outright. Stdlib only:
``status`` starts here."""

from __future__ import annotations

import os

NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "ceph", "fuse.ceph", "glusterfs",
    "fuse.glusterfs", "beegfs", "fuse.sshfs", "9p", "fuse.juicefs", "wekafs", "panfs", "afs",
})


def home_dir() -> str:
    return os.path.expanduser(os.environ.get("FSDP_ORCH_HOME") or os.path.join("~", ".fsdp-orch"))


# What the home holds, where it is there: (name, is a folder)
HOME_ENTRIES = (("runs", True), ("jobs.db", False), ("cache", True), ("fit-cache", True),
                ("schedules", True))


def home_layout_problem(home: str) -> tuple[str, str] | None:
    """(the path, what it should be) for the first entry of the home that is not what fsdp-orch
    made there (``runs`` a file, ``jobs.db`` a folder); None when all are as made or absent."""
    import stat

    for name, folder in HOME_ENTRIES:
        path = os.path.join(home, name)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if (stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)) is False:
            return path, "a folder" if folder else "a file"
    return None


def filesystem_of(path: str, mounts: str | None = None) -> str | None:
    """The filesystem type of the mount that holds ``path``
    (``mounts``: /proc/self/mounts' text)."""
    if mounts is None:
        try:
            with open("/proc/self/mounts", encoding="utf-8") as f:
                mounts = f.read()
        except OSError:
            return None
    target = os.path.realpath(path)
    best, kind = "", None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def on_network_filesystem(path: str, mounts: str | None = None) -> bool:
    return filesystem_of(path, mounts) in NETWORK_FILESYSTEMS


def local_store_dir(home: str) -> str:
    """A folder of this user on this machine, one per ``$FSDP_ORCH_HOME``."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join("/tmp", f"fsdp-orch-{os.getuid()}")
    import hashlib

    digest = hashlib.sha256(os.path.realpath(home).encode()).hexdigest()[:12]
    return os.path.join(base, "fsdp-orch", digest)


def local_store_folders(home: str, mounts: str | None = None) -> list[str]:
    """The folders fsdp-orch makes for a database kept apart from the home (nearest first), which
    must be private like the home (``/tmp/fsdp-orch-<uid>`` could be made by another account);
    none when the database is in the home or named by ``FSDP_ORCH_DB``."""
    if os.environ.get("FSDP_ORCH_DB") or not on_network_filesystem(home, mounts):
        return []
    folder = local_store_dir(home)
    return [folder, os.path.dirname(folder), os.path.dirname(os.path.dirname(folder))]


def store_path(home: str, mounts: str | None = None) -> str:
    explicit = os.environ.get("FSDP_ORCH_DB")
    if explicit:
        return os.path.expanduser(explicit)
    if on_network_filesystem(home, mounts):
        return os.path.join(local_store_dir(home), "jobs.db")
    return os.path.join(home, "jobs.db")
