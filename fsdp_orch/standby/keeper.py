"""The standby keeper of one node and attempt, started detached (its own session) by the launcher:

    python -m fsdp_orch.standby.keeper SOCKET STARTER_PID [waited-on]

It imports torch (never CUDA; at idle priority, unless ``waited-on``: a launcher waits on it now),
then listens on ``SOCKET`` (0600, in the node's private folder) for the one launcher of its attempt.
The launcher sends its ranks' orders with their stdin, stdout and stderr; the keeper forks a child
per rank, answers each child's pid and, as they end, their exit codes. A rank whose launcher goes
away is killed. Asked by its launcher, it forks the next attempt's keeper from itself
(``successor``: no second import). The keeper ends once its ranks have ended, or unused,
``UNCLAIMED_S`` after its starter (the launcher that asked for it, or that needed it at once) ended.

Its environment is the attempt's, less ``FSDP_ORCH_RUN_DIR``: the bootstrap stays out of the keeper
and is installed in each child once the child has its rank's environment.
"""

from __future__ import annotations

import gc
import io
import json
import logging
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import NoReturn

from fsdp_orch.observe.proctree import pid_alive
from fsdp_orch.standby.agent_store import host_store
from fsdp_orch.standby.preload import preload
from fsdp_orch.standby.ranks import (
    UNCLAIMED_S,
    WAITED_ON,
    RankOrder,
    child_argv,
    child_sys_path0,
    decode_orders,
    exit_code,
    keeper_pid_file,
    message,
)
from fsdp_orch.standby.successor import Successor, fork_successor

FDS_PER_RANK = 3
AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
log = logging.getLogger(__name__)


def listen(path: str) -> socket.socket:
    """Bound under a temporary name and renamed: a launcher that sees
    ``path`` finds the keeper ready."""
    partial = f"{path}.{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(partial)
    finally:
        os.umask(old)
    sock.listen(1)
    os.rename(partial, path)
    return sock


def wait_for_claim(listener: socket.socket, starter: int) -> socket.socket | None:
    ended_at = None
    while True:
        ready, _, _ = select.select([listener], [], [], 1.0)
        if ready:
            conn, _ = listener.accept()
            return conn
        if ended_at is None and not pid_alive(starter):
            ended_at = time.monotonic()
        if ended_at is not None and time.monotonic() - ended_at > UNCLAIMED_S:
            return None


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("launcher closed the connection")
        data += chunk
    return data


def receive_orders(conn: socket.socket) -> tuple[list[RankOrder], list[int]]:
    header, fds, _, _ = socket.recv_fds(conn, 8, 256)
    if len(header) < 8:
        header += _recv_exact(conn, 8 - len(header))
    (size,) = struct.unpack("!Q", header)
    return decode_orders(_recv_exact(conn, size)), fds


def become_rank(order: RankOrder, fds: list[int], closing: list[socket.socket]) -> None:
    """In the forked child: the rank's own session, streams, folder, environment and bootstrap."""
    from fsdp_orch.vocab import process_log

    process_log.forget()  # the user's program finds logging as python leaves it
    os.setsid()
    for sock in closing:
        sock.close()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(order.cwd)
    os.environ.clear()
    os.environ.update(order.env)
    if order.unbuffered or order.env.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=True)
    sys.argv = child_argv(order.entry, order.program)
    sys.path[0] = child_sys_path0(order.entry, order.program, order.cwd)
    for entry in reversed(order.env.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(1, entry)
    from fsdp_orch.bootstrap.user_umask import apply_user_umask

    apply_user_umask(order.env)  # the rank's files follow the user's umask, not the keeper's 077
    if order.env.get("FSDP_ORCH_RUN_DIR"):
        from fsdp_orch.bootstrap import agent

        agent.install()


def run_rank(order: RankOrder) -> None:
    """The user's program as ``__main__``, as ``python`` runs it."""
    import runpy

    if order.entry == "script":
        runpy.run_path(order.program[0], run_name="__main__")
    else:
        runpy.run_module(order.program[0], run_name="__main__", alter_sys=True)


def serve(conn: socket.socket, listener: socket.socket) -> RankOrder | Successor | int:
    """Forks the ranks; in a rank returns its order, in a successor what it now serves, in the
    keeper the keeper's exit status."""
    orders, fds = receive_orders(conn)
    if len(fds) != FDS_PER_RANK * len(orders):
        log.error("fsdp-orch standby: "
                  f"expected {FDS_PER_RANK * len(orders)} descriptors, got {len(fds)}")
        return 2
    store: tuple[int, int] | None = None
    if (orders and orders[0].env.get(AGENT_STORE) == "True"
            and orders[0].env.get("GROUP_RANK") == "0"):
        hosted = host_store(orders[0].env)
        if isinstance(hosted, str):  # rank 0 hosts it, as without torchrun's agent
            log.warning("fsdp-orch standby: the attempt's store could not be served "
                        f"({hosted}); rank 0 serves it")
            for order in orders:
                order.env[AGENT_STORE] = "False"
        else:
            store = hosted
    children: dict[int, int] = {}
    gc.freeze()  # what a successor allocated since it was forked: out of its ranks' collections
    for i, order in enumerate(orders):
        mine = fds[FDS_PER_RANK * i:FDS_PER_RANK * (i + 1)]
        pid = os.fork()
        if pid == 0:
            for fd in fds:
                if fd not in mine:
                    os.close(fd)
            if store is not None:
                os.close(store[1])
            become_rank(order, mine, [conn, listener])
            return order
        children[pid] = order.local_rank
    for fd in fds:
        os.close(fd)
    conn.sendall(message(started={str(rank): pid for pid, rank in children.items()}))
    lifelines = [] if store is None else [store[1]]

    def prepare(request: dict) -> Successor | None:  # type: ignore[type-arg]
        return fork_successor(request, conn, [listener], lifelines, listen)

    successor = watch_ranks(conn, children, prepare)
    if successor is not None:
        return successor
    if store is not None:
        os.close(store[1])
        os.waitpid(store[0], 0)
    return 0


def watch_ranks(conn: socket.socket, children: dict[int, int],
                prepare: Callable[[dict], Successor | None]  # type: ignore[type-arg]
                ) -> Successor | None:
    """Reports each rank's end; kills the ranks left when the launcher's connection closes. Forks
    the next attempt's keeper when the launcher asks (``prepare``), and in that child returns it."""
    launcher_gone = False
    pending = b""
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid in children:
            rank = children.pop(pid)
            if not launcher_gone:
                try:
                    conn.sendall(message(exit=[rank, exit_code(status)]))
                except OSError:
                    launcher_gone = True
            continue
        if launcher_gone:
            time.sleep(0.05)
            continue
        ready, _, _ = select.select([conn], [], [], 0.05)
        try:
            data = conn.recv(4096) if ready else b""
        except OSError:
            data = b""
        if ready and not data:
            launcher_gone = True
            for child in children:
                try:
                    os.killpg(child, signal.SIGKILL)
                except OSError:
                    pass
        *lines, pending = (pending + data).split(b"\n")
        for request in requests(lines):
            try:
                successor = prepare(request)
            except OSError:  # the launcher is gone: the loop finds its end of file
                continue
            if successor is not None:
                return successor
    conn.close()
    return None


def requests(lines: list[bytes]) -> list[dict]:  # type: ignore[type-arg]
    """The launcher's requests for a next keeper among the lines it sent."""
    found = []
    for line in lines:
        try:
            request = json.loads(line).get("prepare")
        except (ValueError, AttributeError):
            continue
        if isinstance(request, dict):
            found.append(request)
    return found


keeper_pid = os.getpid()


def main(argv: list[str]) -> RankOrder | int:
    path, starter, waited_on = argv[0], int(argv[1]), argv[2:3] == [WAITED_ON]
    from fsdp_orch.nodeagent.beat_dir import private_beat_dir

    problem = private_beat_dir(os.path.dirname(path))
    if problem is not None:
        log.error(f"fsdp-orch standby: {problem}")
        return 2
    # While it imports, a launcher that finds no socket waits for this keeper
    # instead of starting another.
    with open(os.open(keeper_pid_file(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
              "w") as f:
        f.write(str(os.getpid()))
    try:
        preload(idle=not waited_on)
        outcome = keep(path, starter, listen(path))
    finally:
        if os.getpid() == keeper_pid:
            _unlink(keeper_pid_file(path))
    while isinstance(outcome, Successor):  # a forked child, the next attempt's keeper now
        outcome = keep(outcome.path, outcome.starter, outcome.listener)
    return outcome


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def keep(path: str, starter: int, listener: socket.socket) -> RankOrder | Successor | int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # unused: the files go with it
    try:
        conn = wait_for_claim(listener, starter)
    finally:
        _unlink(path)  # one attempt per keeper
    if conn is None:
        return 0
    _unlink(keeper_pid_file(path))  # claimed: no launcher is to wait for it now
    return serve(conn, listener)


def end(code: int) -> NoReturn:
    """The keeper's end, without the interpreter's teardown, which would touch every object torch's
    import made: 1.2 CPU-seconds measured for a forked keeper (copying the pages it shares with
    the keeper it came from). A keeper runs no one's code but its own: nothing else to flush."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    from fsdp_orch.vocab import process_log

    process_log.setup("stderr")  # its attempt-N.log
    try:
        outcome = main(sys.argv[1:])
    except SystemExit as stop:  # the SIGTERM of an unused keeper: its files are gone
        outcome = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    if isinstance(outcome, int):
        end(outcome)
    run_rank(outcome)
