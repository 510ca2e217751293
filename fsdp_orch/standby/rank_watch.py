"""What a warm launcher does while its ranks run: relays each rank's output as torchrun tees it,
reads the keeper's answers (each rank's pid and end), stops the rest when one fails or the launcher
is signalled, and gives torchrun's exit status and failure summary."""

from __future__ import annotations

import argparse
import json
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from fsdp_orch.standby.ranks import RankEnd, failure_summary

STOP_GRACE_S = 30.0  # torchrun's: SIGTERM to the ranks left, SIGKILL after this


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
        return json.loads(line)


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
                _keeper_gone(pids, ended, ends, node_base)
                continue
            stop_at = _take_answers(lines, pids, ended, ends, node_base, told, stop_at)
        if len(ended) < len(pids) and stop_at is None:
            tick()
        if signalled_at and stop_at is None:
            stop_at = signalled_at[0] + STOP_GRACE_S
        if stop_at is not None and time.monotonic() > stop_at:
            stop(pids, ended, signal.SIGKILL)
    return exit_status(args, ends)


def _keeper_gone(pids: dict[int, int], ended: dict[int, int], ends: list[RankEnd],
                 node_base: int) -> None:
    """The keeper is gone: the ranks left are killed, each ended by SIGKILL."""
    stop(pids, ended, signal.SIGKILL)
    for rank, pid in pids.items():
        if rank not in ended:
            ended[rank] = -signal.SIGKILL
            ends.append(RankEnd(rank, node_base + rank, -signal.SIGKILL, pid, now_text()))


def _take_answers(lines: list[dict[str, Any]], pids: dict[int, int], ended: dict[int, int],
                  ends: list[RankEnd], node_base: int, told: Callable[[dict[str, Any]], None],
                  stop_at: float | None) -> float | None:
    """Records the ranks' ends among the keeper's answers (``told`` gets the others). At the first
    failure, SIGTERM to the ranks left: the time they are killed at (``stop_at`` until then)."""
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
    return stop_at


def exit_status(args: argparse.Namespace, ends: list[RankEnd]) -> int:
    """The launcher's exit status once its ranks have ended: ``plain``, the one process's; else
    torchrun's (0, or 1 with its failure summary on stderr)."""
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
