"""How a warm launcher finds this attempt's keeper: one the attempt before prepared, one this
node's keeper host keeps ready, or one started at once (waited on while it imports torch)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from fsdp_orch.observe.proctree import pid_alive, signal_pids
from fsdp_orch.standby.ranks import (
    WAITED_ON,
    hosted_keepers,
    keeper_pid_file,
    keeper_socket,
    tagged_env,
)

KEEPER_READY_S = 300.0  # a keeper started at once has this long to import torch


def start_keeper(path: str, attempt: int, nproc: int, log: str, *,
                 waited_on: bool) -> subprocess.Popen[bytes]:
    """A keeper for ``attempt`` in its own session (a stop of this attempt's process group spares
    it), tagged with that attempt so ``stop_job_processes`` finds it and the ranks it forks. One
    that a launcher is ``waited_on`` now imports at the normal priority; a next attempt's at idle
    priority."""
    env = dict(os.environ)
    env.pop("FSDP_ORCH_RUN_DIR", None)  # no bootstrap in the keeper itself
    if nproc > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    env = tagged_env(env, attempt)  # last, as a successor forked from it retags them
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "fsdp_orch.standby.keeper", path, str(os.getpid()),
             *([WAITED_ON] if waited_on else [])], env=env,
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)


def connect(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def claim(folder: str, attempt: int, nproc: int) -> tuple[socket.socket | None, str]:
    """A connection to this attempt's keeper, and how it was found (or why there is none)."""
    path = keeper_socket(folder, attempt)
    sock = connect(path)
    if sock is not None:
        return sock, "prepared by the attempt before"
    found = preparing_keeper(path)
    if found is not None:
        how = "prepared by the attempt before, still importing when claimed"
        starting = found

        def alive() -> bool:
            return pid_alive(found, must_contain=path)
    else:
        # Our own child: asked for by its exit status. Its command line can read empty for a
        # moment while it execs (seen on the SLURM test cluster under load), which a check by
        # command line took for a keeper that had ended.
        keeper = start_keeper(path, attempt, nproc, os.path.join(folder, f"attempt-{attempt}.log"),
                              waited_on=True)
        how, starting = "started at once (none was prepared)", keeper.pid

        def alive() -> bool:
            return keeper.poll() is None
    deadline = time.monotonic() + KEEPER_READY_S
    while time.monotonic() < deadline:
        if os.path.exists(path):
            sock = connect(path)
            if sock is not None:
                return sock, how
        if not alive():
            return None, f"the keeper (pid {starting}) ended before it was ready"
        time.sleep(0.02)
    signal_pids([starting], signal.SIGKILL)
    return None, "the keeper was not ready in time"


def node_name() -> str:
    """The node's scheduler name (SLURM's), else its host name: what a keeper host's folder is
    named by."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def claim_hosted(folder: str) -> tuple[socket.socket | None, str]:
    """A connection to a keeper this node's keeper host has ready, and how it was found (or why
    there is none). One still importing is not waited for: it imports at idle priority, which a
    busy node can starve, so the caller starts one at once at the normal priority, and the host's
    stays for the attempt after."""
    try:
        names = hosted_keepers(os.listdir(folder))
    except OSError:
        return None, "no keeper host on this node"
    for name in names:
        if name.endswith(".sock"):
            sock = connect(os.path.join(folder, name))
            if sock is not None:
                return sock, "kept ready on this node by its keeper host"
    if any(name.endswith(".pid") for name in names):
        return None, "the node's keeper host is still preparing its keeper"
    return None, "the node's keeper host had no keeper ready"


def preparing_keeper(path: str) -> int | None:
    """The pid of the keeper that is importing for this socket, if one is."""
    try:
        with open(keeper_pid_file(path), encoding="ascii") as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid, must_contain=path) else None
