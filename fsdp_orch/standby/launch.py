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
import logging
import os
import selectors
import socket
import struct
import sys
import time

from fsdp_orch.nodeagent.beat_dir import private_beat_dir, user_tmp_root
from fsdp_orch.standby.claim import claim, claim_hosted, node_name, start_keeper
from fsdp_orch.standby.rank_watch import Answers, Relay, watch
from fsdp_orch.standby.ranks import (
    NO_STANDBY_EXIT,
    Layout,
    RankOrder,
    encode_orders,
    hosted_folder,
    keeper_socket,
    standby_folder,
    torchrun_env,
)
from fsdp_orch.standby.successor import NextKeeper

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


def send_orders(sock: socket.socket, orders: list[RankOrder], fds: list[int]) -> None:
    data = encode_orders(orders)
    socket.send_fds(sock, [struct.pack("!Q", len(data))], fds)
    sock.sendall(data)


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


if __name__ == "__main__":
    from fsdp_orch.vocab import process_log

    process_log.setup("stderr")  # the node's console, as torchrun's own lines
    raise SystemExit(main(sys.argv[1:]))
