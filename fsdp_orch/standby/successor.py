"""The next attempt's keeper, forked from this attempt's when its launcher asks (``{"prepare":
...}``): a copy-on-write child that has torch imported already, made in milliseconds, where a keeper
started anew imports it again (about 1.7 CPU-seconds here, paid by every job that never restarts).

Forking is as safe here as it is for the ranks: the keeper's only thread is its main thread once its
import is done (the import ran in a thread that has ended), and it never initialises CUDA. The child
takes a session of its own, its own log, and the next attempt's tag in the environment block that
``/proc/<pid>/environ`` reads (``ranks.retag_block``): stopping this attempt by its tag spares it,
and the ranks it forks carry the next attempt's. Its starter, whose end starts its ``UNCLAIMED_S``,
is the launcher that asked.
"""

from __future__ import annotations

import gc
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from fsdp_orch.observe.proctree import pid_alive, signal_pids
from fsdp_orch.standby.ranks import ATTEMPT_TAG, message, retag_block

READY_S = 30.0  # the child says it listens (or why not) within this
log = logging.getLogger(__name__)


@dataclass
class Successor:
    """In the forked child: the keeper it now is, listening, and the launcher that asked for it."""

    path: str
    starter: int
    listener: socket.socket


def peer_pid(conn: socket.socket) -> int:
    """The pid of the process at the other end of a unix socket (its launcher)."""
    pid, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                    struct.calcsize("3i")))
    return int(pid)


def retag_environ(attempt: int) -> str | None:
    """Retags this process's environment block in place for ``attempt`` (and the C ``environ`` entry
    of the slack that moved, and ``os.environ``); or why it could not."""
    import ctypes

    try:
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
        with open("/proc/self/stat", "rb") as f:
            env_start = int(f.read().rsplit(b")", 1)[1].split()[50 - 3])  # field 50: env_start
    except (OSError, IndexError, ValueError) as exc:
        return f"cannot read this process's environment block ({exc})"
    plan = retag_block(block, attempt)
    if isinstance(plan, str):
        return plan
    if not env_start:
        return "the kernel does not say where the environment block is"
    ctypes.memmove(env_start + plan.offset, plan.data, len(plan.data))
    environ = ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), "environ")
    i = 0
    while environ[i]:
        if environ[i] == env_start + plan.slack_was:
            environ[i] = env_start + plan.slack_now
        i += 1
    os.environ[ATTEMPT_TAG] = str(attempt)
    with open("/proc/self/environ", "rb") as f:
        if f"{ATTEMPT_TAG}={attempt}".encode() not in f.read().split(b"\0"):
            return "the environment block did not take the new tag"
    return None


def _become(path: str, attempt: int, closing: list[socket.socket], lifelines: list[int],
            listen: Callable[[str], socket.socket]) -> socket.socket:
    """In the child: its own session and log, the next attempt's tag; listening on ``path``."""
    os.setsid()
    for sock in closing:
        sock.close()  # this attempt's launcher must see this keeper's end alone
    for fd in lifelines:
        os.close(fd)
    log = os.open(path[:-len(".sock")] + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    problem = retag_environ(attempt)
    if problem is not None:
        raise RuntimeError(problem)
    return listen(path)


def fork_successor(request: dict, conn: socket.socket,  # type: ignore[type-arg]
                   closing: list[socket.socket], lifelines: list[int],
                   listen: Callable[[str], socket.socket]) -> Successor | None:
    """Forks the keeper of ``request``'s attempt. In the child: the ``Successor``. In this keeper:
    None, once the launcher has been told the child's pid (``{"next": pid}``) or why there is none
    (``{"next": 0, "why": ...}``)."""
    try:
        path, attempt = str(request["path"]), int(request["attempt"])
    except (KeyError, TypeError, ValueError):
        conn.sendall(message(next=0, why=f"not a request for a keeper: {request!r}"[:200]))
        return None
    if not path.endswith(".sock"):
        conn.sendall(message(next=0, why=f"not a keeper's socket: {path}"))
        return None
    if threading.active_count() > 1:
        conn.sendall(message(next=0, why="the keeper runs a thread: it does not fork"))
        return None
    starter = peer_pid(conn)
    ready_r, ready_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        try:
            listener = _become(path, attempt, [conn, *closing], lifelines, listen)
        except BaseException as exc:  # noqa: BLE001 - told to the keeper, which tells the launcher
            os.write(ready_w, b"0" + str(exc).encode()[:400])
            os._exit(1)
        os.write(ready_w, b"1")
        os.close(ready_w)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # unused: its files go with it
        log.info(f"fsdp-orch standby: keeper for attempt {attempt}, forked from attempt "
                 f"{attempt - 1}'s (pid {os.getppid()}) for launcher {starter}")
        return Successor(path, starter, listener)
    os.close(ready_w)
    ready, _, _ = select.select([ready_r], [], [], READY_S)
    answer = os.read(ready_r, 512) if ready else b"0not ready in time"
    os.close(ready_r)
    if answer[:1] == b"1":
        conn.sendall(message(next=pid))
        return None
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    conn.sendall(message(next=0, why=answer[1:].decode(errors="replace") or "it ended"))
    return None


class NextKeeper:
    """The launcher's side: once ``due``, it asks its keeper to fork the next attempt's keeper at
    ``path``, and learns its pid; where the keeper forked none (it says why), it calls ``start`` (a
    keeper started as before, importing at idle priority)."""

    def __init__(self, sock: socket.socket, path: str, attempt: int, due: float,
                 start: Callable[[], subprocess.Popen[bytes]]):
        self.sock, self.path, self.attempt, self.due, self.start = sock, path, attempt, due, start
        self.asked = False
        self.forked: int | None = None
        self.started: subprocess.Popen[bytes] | None = None

    def ask_when_due(self) -> None:
        if self.asked or time.monotonic() < self.due:
            return
        self.asked = True
        try:
            self.sock.sendall(message(prepare={"path": self.path, "attempt": self.attempt}))
        except OSError:
            pass  # the keeper is gone: the launcher's watch sees it

    def told(self, answer: dict) -> None:  # type: ignore[type-arg]
        """The keeper's answer: the successor's pid, or why it forked none."""
        if "next" not in answer:
            return
        if answer["next"]:
            self.forked = int(answer["next"])
            return
        log.warning(f"fsdp-orch standby: the keeper forked no keeper for attempt {self.attempt} "
                    f"({answer.get('why')}): starting one")
        self.started = self.start()

    def end(self) -> None:
        """No one will claim it (the job's last attempt, most likely): it ends now rather than
        ``UNCLAIMED_S`` after this launcher."""
        if self.forked is not None and pid_alive(self.forked,
                                                 must_contain=os.path.dirname(self.path)):
            signal_pids([self.forked], signal.SIGTERM)
        if self.started is not None:
            self.started.terminate()


__all__ = ["NextKeeper", "Successor", "fork_successor", "peer_pid", "retag_environ"]
