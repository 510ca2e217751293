"""``fsdp-orch logs``: per-node console output and per-rank lines of any attempt."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdp_orch.observe.attempt_files import RANKS_FILE, STACKS_DIR
from fsdp_orch.record.status import JobStatus
from fsdp_orch.supervise.attempt_archive import open_log
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.redact import masked, secret_header, secret_name

# an ended attempt's log may be archived: console-node-N.log.gz (supervise/attempt_archive.py)
_NODE_LOG = re.compile(r"console-node-(\d+)\.log(\.gz)?$")
# torchrun --tee prefixes each worker line with "[<role><local_rank>]:".
_RANK_PREFIX = re.compile(r"^\[default(\d+)\]:")
# How a node's log holds its ranks' output, by launcher (templates/launchers/): torchrun and
# accelerate (its torchrun path) tee each rank's lines tagged with its local rank; xla runs one
# process per node, the node's only rank; python runs one process per node that starts its ranks
# itself (mp.spawn), their lines untagged and interleaved.
TAGGED, OWN, MIXED = "tagged", "own", "mixed"
RANK_LINES = {"torchrun": TAGGED, "accelerate": TAGGED, "xla": OWN, "python": MIXED}


def attempt_dirs(run_dir: Path) -> dict[int, Path]:
    found = {}
    for d in run_dir.glob("attempt-*"):
        suffix = d.name.split("-", 1)[1]
        if suffix.isdigit():
            found[int(suffix)] = d
    return found


def node_logs(attempt_dir: Path) -> dict[int, Path]:
    """Each node's console log of the attempt: the plain one where there is one, else the archived
    (``.gz``) one an ended attempt keeps."""
    found: dict[int, Path] = {}
    for p in sorted(attempt_dir.glob("console-node-*.log*")):
        m = _NODE_LOG.search(p.name)
        if m and (not m.group(2) or int(m.group(1)) not in found):
            found[int(m.group(1))] = p
    return found


def filter_rank(lines: Iterator[str], local_rank: int,
                seen: list[bool] | None = None) -> Iterator[str]:
    """Lines of one local rank from a node console log, prefix removed. ``seen[0]`` becomes True
    once any line tagged with a rank went by."""
    for line in lines:
        m = _RANK_PREFIX.match(line)
        if m and seen is not None:
            seen[0] = True
        if m and int(m.group(1)) == local_rank:
            yield line[m.end():]


def which_logs(logs: dict[int, Path]) -> str:
    """``node 0's log``, ``the logs of nodes 0, 1``: what an attempt's folder holds."""
    if not logs:
        return "no node log yet"
    if len(logs) == 1:
        return f"node {next(iter(logs))}'s log"
    return f"the logs of nodes {', '.join(str(n) for n in sorted(logs))}"


@dataclass(frozen=True)
class Layout:
    """What the job's spec says of where each rank's output goes."""

    launcher: str
    nproc_per_node: int
    world_size: int | None

    @classmethod
    def of(cls, row: JobStatus) -> Layout:
        import json

        try:
            doc = json.loads(row.spec_json)
        except ValueError:
            doc = {}
        resolved = doc.get("_resolved") or {}
        nproc, world = resolved.get("nproc_per_node"), resolved.get("world_size")
        return cls(str(doc.get("launcher") or "torchrun"),
                   nproc if isinstance(nproc, int) and nproc > 0 else 1,
                   world if isinstance(world, int) else None)


def rank_has_no_log(job_id: str, rank: int, node: int, attempt: int, latest: bool, layout: Layout,
                    logs: dict[int, Path]) -> str:
    """Why ``logs --rank`` shows nothing of its own under a launcher whose ranks share a log, and
    where their output is."""
    command = f"fsdp-orch logs {job_id} --node {node}" + ("" if latest else f" --attempt {attempt}")
    return (f"[fsdp-orch] attempt {attempt} has {which_logs(logs)}: launcher: "
            f"{layout.launcher} runs one process per node, which starts its ranks itself, "
            f"so rank {rank} has no log of its own: its output is in node {node}'s log, "
            f"with the other ranks of that node ({command})\n")


def show_logs(index: Any, job_id: str, *, rank: int | None = None, node: int | None = None,
              attempt: int | None = None, follow: bool = False, out: Any = None) -> int:
    """Print the chosen attempt's node logs (all, ``node``'s, or ``rank``'s lines); ``follow``: keep
    printing, moving on to each new attempt when none was chosen, until the job ends (an attempt
    chosen by number: until a later one begins)."""
    out = out or sys.stdout
    if rank is not None and node is not None:
        raise InputError("expected one of --rank or --node, not both", field="--rank/--node")
    row = index.store.job(job_id)
    run_dir = Path(row.run_dir)
    attempts, chosen = _chosen_attempt(job_id, run_dir, attempt)
    layout = Layout.of(row)
    local: int | None = None  # with --rank under a launcher that tags lines: whose lines to keep
    if rank is not None:
        node, local, how = _rank_place(job_id, rank, layout, attempts[chosen])
        if how == MIXED:
            out.write(rank_has_no_log(job_id, rank, node, chosen, attempt is None, layout,
                                      node_logs(attempts[chosen])))
            out.flush()
            return 0
    what = "--rank" if rank is not None else "--node"
    logs = _chosen_logs(attempts[chosen], node, chosen, what, follow)
    positions = {n: 0 for n in logs}
    hidden = secret_values(row)
    printed, tagged = 0, [False]
    while True:
        printed += _print_new(logs, positions, local, tagged, hidden, out)
        ended = not follow or _followed_to_its_end(index, job_id, run_dir, attempts, attempt)
        if ended:
            if follow:  # what was written while the end was looked for
                printed += _print_new(logs, positions, local, tagged, hidden, out)
            if rank is not None and not printed:
                _said_nothing(job_id, rank, chosen, logs, tagged[0], out)
            return _point_to_stacks(attempts[chosen], out)
        if attempt is None and max(attempt_dirs(run_dir)) != chosen:
            attempts = attempt_dirs(run_dir)
            chosen = max(attempts)
            positions, printed, tagged = {}, 0, [False]
            out.write(f"--- attempt {chosen} ---\n")
        # nodes whose logs appeared since
        logs = _chosen_logs(attempts[chosen], node, chosen, what, follow)
        for number in logs:
            positions.setdefault(number, 0)
        time.sleep(0.5)


def _followed_to_its_end(index: Any, job_id: str, run_dir: Path, attempts: dict[int, Path],
                         attempt: int | None) -> bool:
    """Whether ``logs --follow`` is done: the job ended with no attempt left unread, or, for an
    attempt asked for by number, a later attempt began (that one's output is no longer growing)."""
    index.ingest([job_id])
    current = index.store.job(job_id)
    now = attempt_dirs(run_dir)
    if attempt is not None and max(now) > attempt:
        return True
    return current is not None and current.ended and now.keys() == attempts.keys()


def _chosen_attempt(job_id: str, run_dir: Path, attempt: int | None) -> tuple[dict[int, Path], int]:
    """The job's attempt folders, and the one asked for (the latest when none was)."""
    attempts = attempt_dirs(run_dir)
    if not attempts:
        raise InputError(f"job {job_id} has no attempt logs yet", field="logs")
    chosen = max(attempts) if attempt is None else attempt
    if chosen not in attempts:
        raise InputError(f"job {job_id} has attempts {sorted(attempts)}, not {chosen}",
                         field="--attempt")
    return attempts, chosen


def _rank_place(job_id: str, rank: int, layout: Layout,
                attempt_dir: Path | None = None) -> tuple[int, int | None, str]:
    """Where ``rank``'s output is: its node, its local rank when its lines are tagged with it (else
    None), and how the node's log holds its ranks' lines (:data:`RANK_LINES`). The node is the one
    the attempt's ``ranks.json`` names, where the supervisor wrote it (torchrun's c10d rendezvous
    need not give node N ranks N*procs..); else the rank's place in that order."""
    if rank < 0 or (layout.world_size is not None and rank >= layout.world_size):
        raise InputError(f"job {job_id} has ranks 0-{(layout.world_size or 1) - 1}, not {rank}",
                         field="--rank")
    node, local = divmod(rank, layout.nproc_per_node)
    node = _placed_node(attempt_dir, rank, node)
    how = RANK_LINES.get(layout.launcher, MIXED)
    return node, local if how == TAGGED else None, how


def _placed_node(attempt_dir: Path | None, rank: int, otherwise: int) -> int:
    """The node ``ranks.json`` names for ``rank``, else ``otherwise``."""
    if attempt_dir is None:
        return otherwise
    try:
        node = json.loads((attempt_dir / RANKS_FILE).read_text())["nodes"][str(rank)]
    except (OSError, ValueError, KeyError, TypeError):
        return otherwise
    return node if type(node) is int and node >= 0 else otherwise


def _print_new(logs: dict[int, Path], positions: dict[int, int], local: int | None,
               tagged: list[bool], hidden: list[str], out: Any) -> int:
    """Prints what each log gained since its position (then moved on), only ``local``'s lines where
    given, secrets masked; returns how many lines it printed."""
    printed = 0
    for number, path in sorted(logs.items()):
        with open_log(path) as f:
            f.seek(positions[number])
            chunk = f.read()
            positions[number] = f.tell()
        lines: Iterator[str] = iter(chunk.splitlines(keepends=True))
        if local is not None:
            lines = filter_rank(lines, local, tagged)
        prefix = f"[node {number}] " if len(logs) > 1 else ""
        for line in lines:
            out.write(prefix + masked(line, hidden))
            printed += 1
    out.flush()
    return printed


def _chosen_logs(attempt_dir: Path, node: int | None, attempt: int, what: str,
                 follow: bool) -> dict[int, Path]:
    """The attempt's node logs, or only ``node``'s: one not there
    (yet) is an error unless followed."""
    logs = node_logs(attempt_dir)
    if node is None:
        return logs
    if node in logs:
        return {node: logs[node]}
    if follow:
        return {}
    raise InputError(f"attempt {attempt} has {which_logs(logs)}, none of node {node}", field=what)


def _said_nothing(job_id: str, rank: int, attempt: int, logs: dict[int, Path], tagged: bool,
                  out: Any) -> None:
    """``--rank`` found not one line of the rank in its node's log: say so,
    and why when its lines are not tagged (a log written before the launcher tagged them)."""
    for node, path in logs.items():
        why = ("" if tagged or not path.stat().st_size else
               f": its lines are not tagged with their ranks (fsdp-orch logs {job_id} --node "
               f"{node} --attempt {attempt})")
        out.write(f"[fsdp-orch] rank {rank} wrote nothing to node {node}'s log "
                  f"in attempt {attempt}{why}\n")
    out.flush()


def secret_values(row: JobStatus) -> list[str]:
    """The values ``logs`` masks, should a script print them: plain values of secret-named variables
    and headers, and the values references point at where this process can still read them (its own
    environment, the file, or what the private home keeps for a running job)."""
    import json

    from fsdp_orch.jobspec.secrets import SecretRef, resolve
    from fsdp_orch.places import secrets

    try:
        doc = json.loads(row.spec_json)
    except ValueError:
        doc = {}
    pairs = [*(doc.get("env") or {}).items()]
    for hook in doc.get("notify") or []:
        pairs += [*(hook.get("headers") or {}).items()] if isinstance(hook, dict) else []
    values = [str(v) for kept in secrets.read(row.id, "notify").values() for v in kept.values()]
    values += [str(v) for v in secrets.read(row.id, "env").values()]
    for name, value in pairs:
        if isinstance(value, str):
            if secret_name(name) or secret_header(name):
                values.append(value)
            continue
        try:
            values.append(resolve(SecretRef.model_validate(value), os.environ, name))
        except (InputError, ValueError):
            # gone since: it was never printed by fsdp-orch, and the script's output is its own
            continue
    return values


def _point_to_stacks(attempt_dir: Path, out: Any) -> int:
    """After a hang the supervisor dumped every rank's stack:
    say where (they are not in the logs)."""
    stacks = attempt_dir / STACKS_DIR
    dumps = (sorted(p.name for p in stacks.glob("rank-*.txt") if p.stat().st_size)
             if stacks.is_dir() else [])
    if dumps:
        out.write("[fsdp-orch] stack dumps of this attempt's ranks "
                  f"({', '.join(dumps)}): {stacks}\n")
        out.flush()
    return 0
