"""``fsdp-orch logs``: per-node console output and per-rank lines of any attempt."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fsdp_orch.observe.attempt_files import STACKS_DIR
from fsdp_orch.record.model import JobStatus
from fsdp_orch.vocab.errors import InputError
from fsdp_orch.vocab.redact import masked, secret_header, secret_name

_NODE_LOG = re.compile(r"console-node-(\d+)\.log$")
# torchrun --tee prefixes each worker line with "[<role><local_rank>]:".
_RANK_PREFIX = re.compile(r"^\[default(\d+)\]:")


def attempt_dirs(run_dir: Path) -> dict[int, Path]:
    found = {}
    for d in run_dir.glob("attempt-*"):
        suffix = d.name.split("-", 1)[1]
        if suffix.isdigit():
            found[int(suffix)] = d
    return found


def node_logs(attempt_dir: Path) -> dict[int, Path]:
    return {int(m.group(1)): p for p in attempt_dir.glob("console-node-*.log")
            if (m := _NODE_LOG.search(p.name))}


def filter_rank(lines: Iterator[str], local_rank: int) -> Iterator[str]:
    """Lines of one local rank from a node console log, prefix removed."""
    for line in lines:
        m = _RANK_PREFIX.match(line)
        if m and int(m.group(1)) == local_rank:
            yield line[m.end():]


def show_logs(index: Any, job_id: str, *, rank: int | None = None, attempt: int | None = None,
              follow: bool = False, out: Any = None) -> int:
    out = out or sys.stdout
    row = index.store.job(job_id)
    run_dir = Path(row.run_dir)
    attempts = attempt_dirs(run_dir)
    if not attempts:
        raise InputError(f"job {job_id} has no attempt logs yet", field="logs")
    chosen = max(attempts) if attempt is None else attempt
    if chosen not in attempts:
        raise InputError(f"job {job_id} has attempts {sorted(attempts)}, not {chosen}", field="--attempt")
    nproc = _nproc(row)
    logs = node_logs(attempts[chosen])
    if rank is not None:
        node, local = divmod(rank, nproc)
        if node not in logs:
            raise InputError(f"no log for rank {rank} (node {node}) in attempt {chosen}", field="--rank")
        logs = {node: logs[node]}
    positions = {n: 0 for n in logs}
    hidden = secret_values(row)
    while True:
        for node, path in sorted(logs.items()):
            with open(path, errors="replace") as f:
                f.seek(positions[node])
                chunk = f.read()
                positions[node] = f.tell()
            lines: Iterator[str] = iter(chunk.splitlines(keepends=True))
            if rank is not None:
                lines = filter_rank(lines, rank % nproc)
            prefix = f"[node {node}] " if len(logs) > 1 else ""
            for line in lines:
                out.write(prefix + masked(line, hidden))
        out.flush()
        if not follow:
            return _point_to_stacks(attempts[chosen], out)
        index.ingest([job_id])
        current = index.store.job(job_id)
        if current is not None and current.ended and attempt_dirs(run_dir).keys() == attempts.keys():
            return _point_to_stacks(attempts[chosen], out)
        if attempt is None:
            newest = max(attempt_dirs(run_dir))
            if newest != chosen:
                chosen = newest
                attempts = attempt_dirs(run_dir)
                logs = node_logs(attempts[chosen])
                positions = {n: 0 for n in logs}
                out.write(f"--- attempt {chosen} ---\n")
        else:
            logs = node_logs(attempts[chosen]) if not logs else logs
        time.sleep(0.5)


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
            continue  # gone since: it was never printed by fsdp-orch, and the script's output is its own
    return values


def _point_to_stacks(attempt_dir: Path, out: Any) -> int:
    """After a hang the supervisor dumped every rank's stack: say where (they are not in the logs)."""
    stacks = attempt_dir / STACKS_DIR
    dumps = sorted(p.name for p in stacks.glob("rank-*.txt") if p.stat().st_size) if stacks.is_dir() else []
    if dumps:
        out.write(f"[fsdp-orch] stack dumps of this attempt's ranks ({', '.join(dumps)}): {stacks}\n")
        out.flush()
    return 0


def _nproc(row: JobStatus) -> int:
    import json

    try:
        return int(json.loads(row.spec_json)["_resolved"]["nproc_per_node"])
    except (KeyError, ValueError, TypeError):
        return 1
