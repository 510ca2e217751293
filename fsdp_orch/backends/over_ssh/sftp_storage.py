"""Checkpoint discovery on an SSH host's own disk, over SFTP: the ``checkpoints.Storage`` that the
supervisor asks which checkpoint is the latest complete one when the hosts do not share its
filesystem. It asks the first host, where rank 0 writes DCP's ``.metadata`` and our commit record.

One connection, opened when first needed and opened again after it broke (``backoff.SFTP``); the
supervisor's loop is its only user (SFTP clients are not shared between threads)."""

from __future__ import annotations

import errno
import posixpath
import stat
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fsdp_orch.backends.over_ssh.connect import connect
from fsdp_orch.vocab.backoff import SFTP, Sleep, retrying

T = TypeVar("T")
BROKEN_LINK = (errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, None)


class SftpStorage:
    def __init__(self, host: Any, profile: Any, *, connect_to: Callable[[Any, Any], Any] = connect,
                 sleep: Sleep = time.sleep):
        self.host = host
        self.profile = profile
        self.connect_to = connect_to
        self.sleep = sleep
        self._conn: Any = None
        self._sftp: Any = None
        self._me: int | None = None  # the uid we are on the host

    def _call(self, action: Callable[[Any], T], missing: T) -> T:
        """``action(sftp)``; ``missing`` when the path does not exist. A broken connection is opened
        again once; a host that cannot be reached raises (the attempt's liveness check names it)."""
        from paramiko import SSHException

        def broken(exc: Exception) -> bool:
            return isinstance(exc, (EOFError, SSHException)) or (isinstance(exc, OSError)
                                                                 and exc.errno in BROKEN_LINK)

        def once() -> T:
            try:
                if self._sftp is None:
                    self._conn = self.connect_to(self.host, self.profile)
                    self._sftp = self._conn.sftp()
                return action(self._sftp)
            except Exception as exc:
                if isinstance(exc, OSError) and exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    return missing
                if broken(exc):
                    self.close()  # the next try opens it again
                raise

        return retrying(SFTP, sleep=self.sleep, transient=broken)(once)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = self._sftp = None

    def list_dir(self, path: str) -> list[str]:
        return self._call(lambda sftp: sftp.listdir(path), [])

    def is_dir(self, path: str) -> bool:
        return self._call(lambda sftp: stat.S_ISDIR(sftp.stat(path).st_mode or 0), False)

    def exists(self, path: str) -> bool:
        return self._call(lambda sftp: sftp.lstat(path) is not None, False)

    def read_text(self, path: str) -> str | None:
        def read(sftp: Any) -> str | None:
            with sftp.open(path, "rb") as f:
                try:
                    return bytes(f.read()).decode("utf-8")
                except UnicodeDecodeError:
                    return None
        return self._call(read, None)

    def size(self, path: str) -> int | None:
        return self._call(lambda sftp: sftp.stat(path).st_size, None)

    def read_tail(self, path: str, nbytes: int) -> bytes | None:
        def read(sftp: Any) -> bytes:
            with sftp.open(path, "rb") as f:
                size = f.stat().st_size or 0
                f.seek(max(0, size - nbytes))
                return bytes(f.read(nbytes))
        return self._call(read, None)

    def read_range(self, path: str, offset: int, nbytes: int) -> bytes | None:
        """``nbytes`` from ``offset`` (a pickle's step, a safetensors header), or None."""
        def read(sftp: Any) -> bytes:
            with sftp.open(path, "rb") as f:
                f.seek(offset)
                return bytes(f.read(nbytes))
        return self._call(read, None)

    def folder_problem(self, folder: str) -> str | None:
        """places.trust on the host's disk, as the account the host logs us in as."""
        from fsdp_orch.places.trust import folder_problem

        def lstat(path: str) -> tuple[int, int] | None:
            seen = self._call(lambda sftp: sftp.lstat(path), None)
            return None if seen is None else (seen.st_uid or 0, seen.st_mode or 0)

        if self._me is None:
            self._call(lambda sftp: None, None)  # connected
            self._me = int(self._conn.run("id -u", hide=True, in_stream=False).stdout)
        return folder_problem(folder, lstat, self._me,
                              real_path=lambda path: self._call(lambda sftp: sftp.normalize(path),
                                                                path))

    def move(self, src: str, dst: str) -> None:
        def move(sftp: Any) -> None:
            parents = []
            folder = posixpath.dirname(dst)
            while folder not in ("", "/"):
                parents.append(folder)
                folder = posixpath.dirname(folder)
            for folder in reversed(parents):
                try:
                    sftp.mkdir(folder)
                except OSError:
                    pass  # there already
            sftp.rename(src, dst)
        self._call(move, None)
