"""The index's database heals itself. One that is missing, empty or of another schema version is
rebuilt from the event logs. One that SQLite cannot read, or that is not this user's (another
owner, or writable by group or others), is moved aside as ``jobs.db.corrupt-<UTC time>`` with its
``-wal`` and ``-shm`` (never deleted) and rebuilt, with a one-line notice on stderr.

A rebuild runs under one lock (an flock on ``jobs.db.lock``) and builds the whole new index in a
file of its own, which then takes the database's place (``os.replace``): a concurrent ``status``
sees the old index or the whole new one, never one half built.

Where the database is fine this costs a stat per file and a 100-byte read, stdlib only: ``status``
starts here.
"""

from __future__ import annotations

import os
import sqlite3

from fsdp_orch.record.store import Store
from fsdp_orch.record.store_schema import SCHEMA_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MAGIC = b"SQLite format 3\x00"
SIDE_FILES = ("-wal", "-shm")  # SQLite finds them by the database's name: they move with it


def open_store(path: str, build: Callable[[Store], None],
               notice: Callable[[str], None] | None = None) -> Store:
    """The database at ``path``, opened; rebuilt first (``build`` fills a new, empty store from
    the event logs) when it cannot be used as it is."""
    store, _ = _examine(path)
    if store is not None:
        return store
    return _rebuild(path, build, notice or _print_notice)


def examine(path: str) -> tuple[Store | None, str | None]:
    """``_examine`` for a command that only looks: it opens a usable database, and leaves a damaged
    one be (issue 61: no write), told why, for the next command that writes to move aside."""
    return _examine(path)


def _examine(path: str) -> tuple[Store | None, str | None]:
    """(the store, opened, None) when it can be used as it is. Otherwise (None, why it has to be
    moved aside), or (None, None) when it only has to be built: missing, empty, another version."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    for name in (path, *(path + side for side in SIDE_FILES)):
        why = _not_ours(name, st if name == path else None)
        if why:
            return None, why
    if st.st_size == 0:
        return None, None
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        return None, f"it cannot be read ({exc.strerror})"
    if len(header) < 100 or not header.startswith(MAGIC):
        return None, "it is not an SQLite database"
    # The schema version as the file's header has it: another version is rebuilt without opening it
    # in SQLite here (a connection to a file about to be replaced would later close, and tidy up,
    # the -wal by its name, which by then is the new database's).
    if int.from_bytes(header[60:64], "big") != SCHEMA_VERSION:
        return None, None
    store = Store(path, create=False)
    try:
        if store.schema_is_current():
            return store, None
    except sqlite3.OperationalError:
        store.close()
        raise  # busy, locked: not a verdict on the file
    except sqlite3.DatabaseError as exc:
        store.close()
        return None, f"SQLite cannot read it ({exc})"
    store.close()
    return None, None


def _not_ours(path: str, st: os.stat_result | None = None) -> str | None:
    """Why the file at ``path`` is not this user's own to trust,
    or None (also when it is missing)."""
    if st is None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
    if st.st_uid != os.getuid():
        return f"{os.path.basename(path)} belongs to uid {st.st_uid}"
    if st.st_mode & 0o022:
        return (f"{os.path.basename(path)} has mode {st.st_mode & 0o777:o}, "
                "writable by others than its owner")
    if st.st_mode & 0o170000 != 0o100000:  # not S_ISREG
        return f"{os.path.basename(path)} is not a regular file"
    return None


def _rebuild(path: str, build: Callable[[Store], None], notice: Callable[[str], None]) -> Store:
    import fcntl

    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        store, damage = _examine(path)  # another process may have rebuilt it while this one waited
        if store is not None:
            return store
        building = path + ".rebuild"  # only the lock's holder writes it: a leftover is a crash's
        _remove(building)
        fresh = Store(building)
        try:
            build(fresh)
            fresh.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            fresh.close()  # the last connection: SQLite folds the -wal into the file and removes it
        if damage:
            aside = _move_aside(path)
            notice(f"the index {path} could not be used: {damage}; moved it aside to {aside}"
                   " and rebuilt it from the event logs")
        # What is left beside a missing or replaced database would be replayed into the new one.
        _remove(path, keep_main=True)
        os.replace(building, path)
        _remove(building)
        return Store(path, create=False)
    finally:
        os.close(lock)


def _move_aside(path: str) -> str:
    """Rename the database and its -wal and -shm to
    ``<path>.corrupt-<UTC time>[-N]``; returns that."""
    import time

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside, n = f"{path}.corrupt-{stamp}", 1
    while any(os.path.lexists(aside + side) for side in ("", *SIDE_FILES)):
        n += 1
        aside = f"{path}.corrupt-{stamp}-{n}"
    for side in ("", *SIDE_FILES):
        try:
            os.rename(path + side, aside + side)
        except FileNotFoundError:
            pass
    return aside


def _remove(path: str, keep_main: bool = False) -> None:
    for side in SIDE_FILES if keep_main else ("", *SIDE_FILES):
        try:
            os.unlink(path + side)
        except FileNotFoundError:
            pass


def _print_notice(text: str) -> None:
    import sys

    print(f"fsdp-orch: notice: {text}", file=sys.stderr)
