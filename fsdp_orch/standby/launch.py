"""The warm launcher, run by a node's launch script in torchrun's (or python's) place:

    python -m fsdp_orch.standby.launch --mode torchrun|plain --nproc N ...
        --entry script|module -- PROGRAM...

It asks this attempt's keeper (prepared by the attempt before; else started now) for its ranks,
has that keeper fork the next attempt's keeper from itself (no second import of torch) once this
attempt has run ``--prepare-next-after`` seconds (unless it ended first), and behaves as torchrun
does for the supervisor: each rank's
lines on its console prefixed ``[default<local rank>]:`` and kept per rank under ``--log-dir``; when
a rank fails, the others are stopped and torchrun's failure summary is printed, exit 1. ``plain``
(the python launcher: one process that spawns its own workers) passes the streams and the exit
status through. Exits ``NO_STANDBY_EXIT`` (75) without starting anything when no keeper can serve:
the script starts cold.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable

from fsdp_orch.nodeagent.beat_dir import private_beat_dir, user_tmp_root
from fsdp_orch.observe.proctree import pid_alive, signal_pids
from fsdp_orch.standby.ranks import (
    NO_STANDBY_EXIT,
    WAITED_ON,
    Layout,
    RankEnd,
    RankOrder,
    encode_orders,
    failure_summary,
    hosted_folder,
    hosted_keepers,
    keeper_pid_file,
    keeper_socket,
    standby_folder,
    tagged_env,
    torchrun_env,
)
from fsdp_orch.standby.successor import NextKeeper

KEEPER_READY_S = 300.0  # a keeper started at once has this long to import torch
STOP_GRACE_S = 30.0  # torchrun's: SIGTERM to the ranks left, SIGKILL after this
log = logging.getLogger(__name__)


def say(text: str, level: int = logging.INFO) -> None:
    log.log(level, f"fsdp-orch standby: {text}")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fsdp_orch.standby.launch")
    p.add_argument("--mode", choices=("torchrun", "plain"), required=True)
    p.add_argument("--node", type=int, default=0)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--run-id", default="none")
    p.add_argument("--log-dir", default=None)
    p.add_argument("--entry", choices=("script", "module"), required=True)
    # The node's keeper host (``standby.host``) keeps keepers ready: claim one of its, and leave
    # the next to it.
    p.add_argument("--hosted", action="store_true")
    # Seconds this attempt runs before the next attempt's keeper is prepared (0: at once).
    p.add_argument("--prepare-next-after", type=float, default=0.0)
    p.add_argument("program", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.program[:1] == ["--"]:
        args.program = args.program[1:]
    return args


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


def send_orders(sock: socket.socket, orders: list[RankOrder], fds: list[int]) -> None:
    data = encode_orders(orders)
    socket.send_fds(sock, [struct.pack("!Q", len(data))], fds)
    sock.sendall(data)


class Relay:
    """Each rank's stdout and stderr: to this console prefixed as torchrun tees them,
    and to the rank's own files under the log folder."""

    def __init__(self, selector: selectors.BaseSelector, log_dir: str | None, run_id: str):
        self.selector = selector
        self.log_dir = log_dir
        self.run_id = run_id
        self.partial: dict[int, bytes] = {}
        self.open = 0

    def add(self, fd: int, local_rank: int, name: str) -> None:
        target = sys.stdout.buffer if name == "stdout" else sys.stderr.buffer
        keep = None
        if self.log_dir:
            folder = os.path.join(self.log_dir, f"{self.run_id}_standby", "attempt_0",
                                  str(local_rank))
            os.makedirs(folder, 0o700, exist_ok=True)
            keep = open(os.path.join(folder, f"{name}.log"), "ab")
        self.selector.register(fd, selectors.EVENT_READ, (local_rank, target, keep))
        self.open += 1

    def read(self, fd: int, data: tuple[int, object, object]) -> None:
        local_rank, target, keep = data
        chunk = os.read(fd, 65536)
        text = self.partial.pop(fd, b"") + chunk
        lines = text.split(b"\n")
        rest = lines.pop()
        if not chunk:  # the rank closed it: its last line, if unterminated
            if rest:
                lines.append(rest)
            rest = b""
            self.selector.unregister(fd)
            os.close(fd)
            self.open -= 1
        elif rest:
            self.partial[fd] = rest
        if not lines:
            return
        prefix = f"[default{local_rank}]:".encode()
        target.write(b"".join(prefix + line + b"\n"  # type: ignore[attr-defined]
                              for line in lines))
        target.flush()  # type: ignore[attr-defined]
        if keep is not None:
            keep.write(b"".join(line + b"\n" for line in lines))  # type: ignore[attr-defined]
            keep.flush()  # type: ignore[attr-defined]


def stop(pids: dict[int, int], ended: dict[int, int], sig: int) -> None:
    for local_rank, pid in pids.items():
        if local_rank not in ended:
            try:
                os.kill(pid, sig)
            except OSError:
                pass


def now_text() -> str:
    return time.strftime("%Y-%m-%d_%H:%M:%S")


# The launcher's exit status when this node cannot start warm while the attempt's other nodes do.
WARM_ELSEWHERE_EXIT = 1


def cold_or_fail(args: argparse.Namespace, why: str) -> int:
    """No keeper can serve this node: it starts cold (``NO_STANDBY_EXIT``) when it is the attempt's
    only node. Of several, the others start from their keepers, whose store torchrun's c10d
    rendezvous on this one would never meet (the attempt waited for its start-up timeout): the
    attempt fails at once, saying so, and the next one tries again."""
    if args.nnodes == 1:
        say(f"{why}; starting cold", logging.WARNING)
        return NO_STANDBY_EXIT
    say(f"{why}; node {args.node} of {args.nnodes} cannot start warm while the others do, and a "
        "cold start here would not meet them: this attempt fails (launch.standby: off starts "
        "every node cold)", logging.ERROR)
    return WARM_ELSEWHERE_EXIT


def main(argv: list[str]) -> int:
    args = parse(argv)
    job_id, attempt = os.environ["FSDP_ORCH_JOB_ID"], int(os.environ.get("FSDP_ORCH_ATTEMPT", "0"))
    folder = standby_folder(user_tmp_root(), job_id, args.node,
                            os.environ.get("FSDP_ORCH_STANDBY_PLACE", ""))
    problem = private_beat_dir(folder)
    if problem is not None:
        return cold_or_fail(args, problem)
    nproc = args.nproc if args.mode == "torchrun" else 1
    sock, how = None, ""
    if args.hosted:
        sock, how = claim_hosted(hosted_folder(user_tmp_root(), job_id, node_name()))
        if sock is None:
            say(f"{how}: starting a keeper at once")
    if sock is None:
        sock, how = claim(folder, attempt, nproc)
    if sock is None:
        return cold_or_fail(args, f"none for attempt {attempt}: {how}")
    layout = Layout(args.node, args.nnodes, args.nproc, args.master_addr, args.master_port,
                    args.run_id)
    cwd = os.getcwd()
    base = dict(os.environ)
    selector = selectors.DefaultSelector()
    relay = Relay(selector, args.log_dir, args.run_id)
    orders, fds, ours = [], [], []
    for local_rank in range(nproc):
        env = torchrun_env(layout, local_rank, base) if args.mode == "torchrun" else base
        orders.append(RankOrder(local_rank, args.entry, list(args.program), cwd, env,
                                unbuffered=args.mode == "plain"))
        if args.mode == "torchrun":
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            relay.add(out_r, local_rank, "stdout")
            relay.add(err_r, local_rank, "stderr")
            fds += [0, out_w, err_w]
            ours += [out_w, err_w]
        else:
            fds += [0, 1, 2]
    send_orders(sock, orders, fds)
    for fd in ours:
        os.close(fd)
    return supervise(sock, selector, relay, args, attempt, folder, how)


class Answers:
    """The keeper's answers, one JSON line each, read as they come (the selector says when)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.pending = b""

    def read(self) -> list[dict] | None:  # type: ignore[type-arg]
        """The complete lines received so far; None once the keeper has closed the connection."""
        chunk = self.sock.recv(65536)
        if not chunk:
            return None
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        return [json.loads(line) for line in lines if line]

    def first(self) -> dict:  # type: ignore[type-arg]
        while b"\n" not in self.pending:
            chunk = self.sock.recv(65536)
            if not chunk:
                return {}
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)  # type: ignore[no-any-return]


def supervise(sock: socket.socket, selector: selectors.BaseSelector, relay: Relay,
              args: argparse.Namespace, attempt: int, folder: str, how: str) -> int:
    answers = Answers(sock)
    started = answers.first().get("started")
    if not started:
        say("the keeper started no ranks", logging.ERROR)
        return 1
    pids = {int(rank): pid for rank, pid in started.items()}
    say(f"attempt {attempt}: {len(pids)} rank(s) started from the standby ({how}), torch preloaded")
    if args.hosted:  # the node's keeper host prepares the next one
        return watch(answers, selector, relay, args, pids)
    path = keeper_socket(folder, attempt + 1)
    nxt = NextKeeper(sock, path, attempt + 1, time.monotonic() + args.prepare_next_after,
                     start=lambda: start_keeper(path, attempt + 1, len(pids),
                                                os.path.join(folder, f"attempt-{attempt + 1}.log"),
                                                waited_on=False))
    nxt.ask_when_due()
    code = watch(answers, selector, relay, args, pids, tick=nxt.ask_when_due, told=nxt.told)
    if code == 0:  # the job's last attempt, most likely: no one will claim the next keeper
        nxt.end()
    return code


def watch(answers: Answers, selector: selectors.BaseSelector, relay: Relay,
          args: argparse.Namespace, pids: dict[int, int],
          tick: Callable[[], None] = lambda: None,
          told: Callable[[dict], None] = lambda _: None) -> int:  # type: ignore[type-arg]
    """Relays the ranks' output until they have all ended; stops the rest when one fails, or when
    this launcher is signalled. torchrun's exit status and failure summary. ``tick`` runs at least
    every half second while the ranks run; ``told`` gets the keeper's answers other than a rank's
    end."""
    ended: dict[int, int] = {}
    ends: list[RankEnd] = []
    stop_at: float | None = None
    signalled_at: list[float] = []

    def on_signal(_sig: int, _frame: object) -> None:
        signalled_at.append(time.monotonic())
        stop(pids, ended, signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    selector.register(answers.sock, selectors.EVENT_READ, None)
    node_base = args.node * args.nproc
    while len(ended) < len(pids) or relay.open:
        for key, _ in selector.select(timeout=0.5):
            if key.data is not None:
                relay.read(key.fd, key.data)
                continue
            lines = answers.read()
            if lines is None:  # the keeper is gone: its ranks' ends will not be told
                selector.unregister(answers.sock)
                stop(pids, ended, signal.SIGKILL)
                for rank, pid in pids.items():
                    if rank not in ended:
                        ended[rank] = -signal.SIGKILL
                        ends.append(RankEnd(rank, node_base + rank, -signal.SIGKILL, pid,
                                            now_text()))
                continue
            for line in lines:
                if "exit" not in line:
                    told(line)
                    continue
                local_rank, code = line["exit"]
                ended[local_rank] = code
                ends.append(RankEnd(local_rank, node_base + local_rank, code, pids[local_rank],
                                    now_text()))
                if code != 0 and stop_at is None:
                    stop_at = time.monotonic() + STOP_GRACE_S
                    stop(pids, ended, signal.SIGTERM)
        if len(ended) < len(pids) and stop_at is None:
            tick()
        if signalled_at and stop_at is None:
            stop_at = signalled_at[0] + STOP_GRACE_S
        if stop_at is not None and time.monotonic() > stop_at:
            stop(pids, ended, signal.SIGKILL)
    if args.mode == "plain":
        code = ends[0].code if ends else 1
        return 128 - code if code < 0 else code
    failed = [end for end in ends if end.code != 0]
    if not failed:
        return 0
    sys.stdout.flush()
    sys.stderr.write(failure_summary(sys.executable, args.program[0], failed[0], failed[1:],
                                     socket.gethostname()))
    sys.stderr.flush()
    return 1


if __name__ == "__main__":
    from fsdp_orch.vocab import process_log

    process_log.setup("stderr")  # the node's console, as torchrun's own lines
    raise SystemExit(main(sys.argv[1:]))
