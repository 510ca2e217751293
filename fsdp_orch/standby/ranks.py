"""Pure parts of the warm standby: where a keeper listens, the environment torchrun would give each
rank, the wire format between launcher and keeper, and torchrun's failure summary (which the log
classifier reads). No I/O here."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass

# The launcher's exit status when no standby can serve the attempt: the node script starts cold.
NO_STANDBY_EXIT = 75
# The role torchrun names every worker with (its log prefix is ``[<role><local rank>]:``).
ROLE = "default"
# A keeper the attempt before prepared waits this long for its attempt after that attempt's
# launcher has ended (the supervisor's verdict and backoff); then it ends, unused.
UNCLAIMED_S = 120.0
# The keeper's third argument when a launcher waits on it now (none was prepared): it imports at the
# normal priority, since at idle priority a busy node (other jobs,
# stress) can starve the very start it holds up.
WAITED_ON = "waited-on"


# A keeper's environment ends with its attempt's tag and then this slack: a successor forked from
# it for the next attempt (no import of torch of its own) rewrites the two in place, in the bytes
# ``/proc/<pid>/environ`` reads, so that stopping attempt K by its tag spares attempt K+1's keeper
# and finds the ranks that keeper forks. The slack lets the tag grow by as many digits.
ATTEMPT_TAG = "FSDP_ORCH_ATTEMPT"
TAG_SLACK = "FSDP_ORCH_STANDBY_SLACK"
SLACK_BYTES = 16


def tagged_env(env: dict[str, str], attempt: int) -> dict[str, str]:
    """``env`` with ``attempt``'s tag and the slack last, in that order (the order the process's
    environment block keeps)."""
    out = {k: v for k, v in env.items() if k not in (ATTEMPT_TAG, TAG_SLACK)}
    out[ATTEMPT_TAG] = str(attempt)
    out[TAG_SLACK] = "." * SLACK_BYTES
    return out


@dataclass(frozen=True)
class Retag:
    """The bytes that retag an environment block: ``data`` written at ``offset``; the slack's entry
    moves from ``slack_was`` to ``slack_now`` (offsets in the block)."""

    offset: int
    data: bytes
    slack_was: int
    slack_now: int


def retag_block(block: bytes, attempt: int) -> Retag | str:
    """How to retag a process's environment block (``/proc/<pid>/environ``: NUL-terminated
    entries) from its attempt to ``attempt`` in place, keeping its length; or why it cannot."""
    tag, slack = f"{ATTEMPT_TAG}=".encode(), f"{TAG_SLACK}=".encode()
    offset = 0
    entries = block.split(b"\0")
    for entry, after in zip(entries, entries[1:], strict=False):
        if entry.startswith(tag) and after.startswith(slack):
            new = tag + str(attempt).encode()
            room = len(entry) + len(after) - len(new) - len(slack)
            if room < 0:
                return f"no room left to tag attempt {attempt}"
            return Retag(offset, new + b"\0" + slack + b"." * room + b"\0",
                         offset + len(entry) + 1, offset + len(new) + 1)
        offset += len(entry) + 1
    return f"the environment does not end with {ATTEMPT_TAG} and {TAG_SLACK}"


def standby_folder(user_root: str, job_id: str, node_rank: int, place: str = "") -> str:
    """The node's private folder of the job's keepers:
    ``<tmp>/fsdp-orch-<uid>/<job>/standby/node-N``; ``-<place>`` added where the node's launch
    script names the host (``FSDP_ORCH_STANDBY_PLACE``, SSH hosts): node N's keeper prepared on a
    host left out since is never claimed on the host that took its place, where the two share a
    /tmp (hosts in network namespaces of one machine: its ranks would run in the other's)."""
    name = f"node-{node_rank}-{place}" if place else f"node-{node_rank}"
    return os.path.join(user_root, job_id, "standby", name)


def hosted_folder(user_root: str, job_id: str, node_name: str) -> str:
    """The node's private folder of the keepers its keeper host (``standby.host``) keeps ready:
    ``<tmp>/fsdp-orch-<uid>/<job>/standby/host-<node name>`` (by name: an attempt after a node was
    left out gives the nodes other ranks)."""
    return os.path.join(user_root, job_id, "standby", f"host-{node_name}")


def hosted_keeper_socket(folder: str, sequence: int) -> str:
    return os.path.join(folder, f"keeper-{sequence}.sock")


def hosted_keepers(names: list[str]) -> list[str]:
    """Of a hosted folder's file names, the keepers' sockets and pid files, newest keeper first."""
    def sequence(name: str) -> int:
        number = name[len("keeper-"):].split(".", 1)[0]
        return int(number) if number.isdigit() else -1

    return sorted((n for n in names if n.startswith("keeper-") and n.endswith((".sock",
                                                                               ".sock.pid"))
                   and sequence(n) >= 0), key=lambda n: (-sequence(n), n))


def keeper_socket(folder: str, attempt: int) -> str:
    return os.path.join(folder, f"attempt-{attempt}.sock")


def keeper_pid_file(socket_path: str) -> str:
    """Where a keeper that is still importing says its pid."""
    return socket_path + ".pid"


@dataclass(frozen=True)
class Layout:
    """Where this node's ranks sit in the job, as torchrun's agent would place them."""

    node_rank: int
    nnodes: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    run_id: str


def torchrun_env(layout: Layout, local_rank: int, base: dict[str, str]) -> dict[str, str]:
    """``base`` plus the variables torchrun's local agent sets for a worker
    (torch/distributed/elastic/agent/server/local_elastic_agent.py). As under torchrun, the store
    is the agent's: node 0's keeper serves it (``TORCHELASTIC_USE_AGENT_STORE`` True; the keeper
    sets it False, and rank 0 serves it, where it cannot)."""
    world = layout.nnodes * layout.nproc_per_node
    rank = layout.node_rank * layout.nproc_per_node + local_rank
    env = dict(base)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(local_rank), "GROUP_RANK": str(layout.node_rank),
        "ROLE_RANK": str(rank), "ROLE_NAME": ROLE, "LOCAL_WORLD_SIZE": str(layout.nproc_per_node),
        "WORLD_SIZE": str(world), "GROUP_WORLD_SIZE": str(layout.nnodes),
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": layout.master_addr, "MASTER_PORT": str(layout.master_port),
        "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": layout.run_id, "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    })
    if "OMP_NUM_THREADS" not in base and layout.nproc_per_node > 1:
        env["OMP_NUM_THREADS"] = "1"  # torchrun's default for several workers per node
    return env


@dataclass(frozen=True)
class RankOrder:
    """What the keeper's child becomes: ``entry`` is ``script`` or ``module``; ``program`` its
    target and arguments (``sys.argv`` as ``python`` would set it is derived by the child)."""

    local_rank: int
    entry: str
    program: list[str]
    cwd: str
    env: dict[str, str]
    unbuffered: bool = False  # as ``python -u`` (the python launcher's cold command)


def encode_orders(orders: list[RankOrder]) -> bytes:
    return json.dumps([o.__dict__ for o in orders]).encode()


def decode_orders(data: bytes) -> list[RankOrder]:
    return [RankOrder(**item) for item in json.loads(data)]


def message(**fields: object) -> bytes:
    """One line of the keeper's answers: ``{"started": {local rank: pid}}``,
    ``{"exit": [local rank, code]}``, ``{"next": pid}`` (the successor it forked for the next
    attempt; 0 and ``why`` where it could not); and of the launcher's one request,
    ``{"prepare": {"path": socket, "attempt": next attempt}}``."""
    return json.dumps(fields).encode() + b"\n"


def exit_code(wait_status: int) -> int:
    """A child's status as torchrun reports it: the exit code,
    or minus the signal that killed it."""
    return os.waitstatus_to_exitcode(wait_status)


@dataclass(frozen=True)
class RankEnd:
    local_rank: int
    rank: int
    code: int
    pid: int
    at: str  # torchrun's time format, 2024-01-31_12:00:00


def _failure_block(index: int, end: RankEnd, host: str) -> list[str]:
    if end.code < 0:
        try:
            name = signal.Signals(-end.code).name
        except ValueError:
            name = "UNKNOWN"
        trace = f"Signal {-end.code} ({name}) received by PID {end.pid}"
    else:
        trace = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    return [f"[{index}]:", f"  time      : {end.at}", f"  host      : {host}",
            f"  rank      : {end.rank} (local_rank: {end.local_rank})",
            f"  exitcode  : {end.code} (pid: {end.pid})", "  error_file: <N/A>",
            f"  traceback : {trace}"]


def failure_summary(binary: str, program: str, first: RankEnd, others: list[RankEnd],
                    host: str) -> str:
    """torchrun's report of a failed worker group, line for line the shape the supervisor reads
    (the first failure's "Root Cause" block: ``supervise/torchrun_summary.py``; ``failed (exitcode:
    N) local_rank: R``: ``supervise/log_signatures.py``)."""
    bar, rule = "=" * 60, "-" * 60
    lines = ["torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
             f"(exitcode: {first.code}) local_rank: {first.local_rank} (pid: {first.pid}) "
             f"of binary: {binary}",
             "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", bar,
             f"{os.path.basename(program)} FAILED", rule, "Failures:"]
    if others:
        for end in others:
            lines += _failure_block(end.local_rank, end, host)
    else:
        lines.append("  <NO_OTHER_FAILURES>")
    lines += [rule, "Root Cause (first observed failure):",
              *_failure_block(first.local_rank, first, host), bar]
    return "\n".join(lines) + "\n"


def child_argv(entry: str, program: list[str]) -> list[str]:
    """``sys.argv`` as ``python script ARGS`` or ``python -m module ARGS`` sets it
    (runpy fills in the module's path for ``-m``)."""
    return list(program) if entry == "script" else ["-m", *program[1:]]


def child_sys_path0(entry: str, program: list[str], cwd: str) -> str:
    """``sys.path[0]`` as ``python`` sets it: the script's folder,
    or the working folder for ``-m``."""
    if entry == "script":
        return os.path.dirname(os.path.realpath(os.path.join(cwd, program[0])))
    return cwd


__all__ = ["ATTEMPT_TAG", "Layout", "NO_STANDBY_EXIT", "RankEnd", "RankOrder", "Retag", "TAG_SLACK",
           "UNCLAIMED_S", "child_argv", "child_sys_path0", "decode_orders", "encode_orders",
           "exit_code", "failure_summary", "keeper_pid_file", "keeper_socket", "message",
           "retag_block", "standby_folder", "tagged_env", "torchrun_env"]
