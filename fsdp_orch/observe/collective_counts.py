"""Which rank is behind in its collectives, read from PyTorch's flight recorder dumps (what NCCL
RAS's status output says is :mod:`fsdp_orch.observe.nccl_ras`'s). Pure and torch-free: the caller
passes the bytes.

One dump per rank (``<prefix><rank>``; the dump itself does not name its
rank): a pickle (``_dump_nccl_trace`` / ``_dump_fr_trace``, what a timeout writes) or JSON
(``_dump_*_json``), read by an unpickler that builds plain containers and refuses every global.
Per process group: the last enqueued/started/completed collective sequence numbers (``pg_status``,
dump version >= 2.5), else derived from the entries (versions 1.x call the number ``seq_id``).
``last_started`` is -1 unless NCCL's start events exist (``TORCH_NCCL_ENABLE_TIMING``), and gloo
tracks neither start nor (for ``async_op`` work) completion: ``last_enqueued`` is the count every
backend keeps.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fsdp_orch.observe.nccl_env import FLIGHT_RECORDER_PREFIXES


@dataclass(frozen=True)
class GroupProgress:
    """One process group's collectives on one rank. Sequence numbers count from 1; -1: none, or
    not tracked."""

    key: str  # the group's name (``process_group[0]``: "0" is the default group), else "pg<pg_id>"
    desc: str | None  # "default_pg", "undefined", or the group_desc the script gave
    last_enqueued: int
    last_started: int
    last_completed: int
    last_collective: str | None  # profiling_name of the group's newest entry ("nccl:all_reduce")
    waiting_in: str | None  # the oldest collective after last_completed: where the rank waits


@dataclass(frozen=True)
class FlightRecord:
    version: str | None
    rank: int | None  # passed in (the file name's), or None
    groups: Mapping[str, GroupProgress]
    entries: int


class _NoGlobals(pickle.Unpickler):
    """A flight recorder dump is dicts, lists, tuples,
    strings and numbers: any global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name} refused")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent id refused")


def as_int(value: Any) -> int | None:
    """An int, or a string of one (the JSON dump writes pg_status values as strings, RAS's JSON
    some of its numbers)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def _load(data: bytes) -> Any:
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        return json.loads(data.decode("utf-8"))
    return _NoGlobals(io.BytesIO(data)).load()


def _entry_seq(entry: Mapping[str, Any]) -> int | None:
    seq = as_int(entry.get("collective_seq_id", entry.get("seq_id")))
    return None if seq is None or entry.get("is_p2p") is True else seq


def _group_key(entry: Mapping[str, Any]) -> tuple[str, str | None]:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and pg and isinstance(pg[0], str) and pg[0]:
        desc = pg[1] if len(pg) > 1 and isinstance(pg[1], str) else None
        return pg[0], desc
    return f"pg{entry.get('pg_id')}", None


def _progress(key: str, desc: str | None, status: Mapping[str, Any] | None,
              entries: list[Mapping[str, Any]]) -> GroupProgress:
    seqs = [(s, e) for e in entries if (s := _entry_seq(e)) is not None]
    if status is not None:
        enq, started, done = (as_int(status.get(f"last_{k}_collective")) for k in
                              ("enqueued", "started", "completed"))
    else:  # before pg_status (dump version < 2.5): what the buffer's entries say
        enq = max((s for s, _ in seqs), default=-1)
        started = max((s for s, e in seqs if e.get("state") in ("started", "completed")),
                      default=-1)
        done = max((s for s, e in seqs if e.get("state") == "completed"), default=-1)
    enq, started, done = (-1 if v is None else v for v in (enq, started, done))
    pending = [e for s, e in seqs if s > done]
    name = entries[-1].get("profiling_name") if entries else None
    waiting = pending[0].get("profiling_name") if pending else None
    return GroupProgress(key, desc, enq, started, done, name if isinstance(name, str) else None,
                         waiting if isinstance(waiting, str) else None)


def _read(dump: Any, rank: int | None) -> FlightRecord | None:
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        return None
    if "entries" not in dump and "pg_status" not in dump:
        return None
    entries = [e for e in dump.get("entries", []) if isinstance(e, dict)]
    by_pg: dict[str, list[Mapping[str, Any]]] = {}
    names: dict[str, tuple[str, str | None]] = {}
    for entry in entries:
        pg_id = str(entry.get("pg_id"))
        by_pg.setdefault(pg_id, []).append(entry)
        names.setdefault(pg_id, _group_key(entry))
    status = dump.get("pg_status")
    status = {str(k): v for k, v in status.items() if isinstance(v, dict)} \
        if isinstance(status, dict) else None
    groups = {}
    for pg_id in sorted(set(by_pg) | set(status or ()),
                        key=lambda p: (as_int(p) is None, as_int(p) or 0, p)):
        key, desc = names.get(pg_id, (f"pg{pg_id}", None))
        if key == "pg0":
            key = "0"  # pg_id 0 is the default group (created first), named "0"
        groups[key] = _progress(key, desc, None if status is None else status.get(pg_id),
                                by_pg.get(pg_id, []))
    version = dump.get("version")
    return FlightRecord(version if isinstance(version, str) else None, rank, groups, len(entries))


def parse_flight_recorder(data: bytes, rank: int | None = None) -> FlightRecord | None:
    """One rank's dump (pickle or JSON); None when ``data`` is not
    one. ``rank``: the file name's."""
    try:
        return _read(_load(data), rank)
    except Exception:  # a truncated, foreign or hostile file is no dump: never raise
        return None


def rank_from_name(name: str, prefix: str | None = None) -> int | None:
    """The rank of a dump file named ``<prefix><rank>`` (a path's folders are ignored); ``prefix``
    None: any of ``FLIGHT_RECORDER_PREFIXES``."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    prefixes = FLIGHT_RECORDER_PREFIXES if prefix is None else (prefix,)
    match = re.fullmatch("(?:" + "|".join(map(re.escape, prefixes)) + r")(\d+)", base)
    return int(match.group(1)) if match else None


def parse_dumps(files: Mapping[str, bytes],
                prefix: str | None = None) -> dict[int, FlightRecord]:
    """``{rank: record}`` of the files named ``<prefix><rank>`` that are dumps (``prefix`` None:
    any of ``FLIGHT_RECORDER_PREFIXES``)."""
    out = {}
    for name, data in files.items():
        rank = rank_from_name(name, prefix)
        record = None if rank is None else parse_flight_recorder(data, rank)
        if record is not None and rank is not None:
            out[rank] = record
    return out


def _measure(progress: Iterable[GroupProgress]) -> str:
    """``last_started`` where every rank tracked it, else ``last_enqueued``: one measure for all."""
    rows = list(progress)
    return "last_started" if rows and all(p.last_started >= 0 for p in rows) else "last_enqueued"


def _counts(records: Mapping[int, FlightRecord], key: str) -> dict[int, int]:
    rows = {rank: r.groups[key] for rank, r in records.items() if key in r.groups}
    measure = _measure(rows.values())
    return {rank: getattr(p, measure) for rank, p in rows.items()}


def choose_group(records: Mapping[int, FlightRecord]) -> str | None:
    """The group to compare: the default group when the ranks disagree on it, else the first group
    (by name) that at least two ranks have and they disagree on, else the default group."""
    keys = sorted({k for r in records.values() for k in r.groups},
                  key=lambda k: (k != "0", as_int(k) is None, as_int(k) or 0, k))
    shared = [k for k in keys if sum(k in r.groups for r in records.values()) >= 2]
    for key in shared:
        if len(set(_counts(records, key).values())) > 1:
            return key
    if "0" in keys:
        return "0"
    return shared[0] if shared else keys[0] if keys else None


def counts_from_dumps(records: Mapping[int, FlightRecord],
                      group: str | None = None) -> dict[int, int]:
    """``{rank: last started collective}`` in ``group`` (default: :func:`choose_group`), or the
    last enqueued one where a rank did not track starts. Ranks without the group are left out."""
    key = group if group is not None else choose_group(records)
    return {} if key is None else _counts(records, key)


# Backends whose collective's Python call returns at once,
# the wait coming at a device synchronisation.
ASYNC_BACKENDS = ("nccl", "xccl")


def pending_collectives(records: Mapping[int, FlightRecord]) -> dict[int, str]:
    """``{rank: collective}`` for each rank that has a collective enqueued and not completed on a
    device backend, in the lowest-numbered group that has one ("nccl:all_reduce"). On NCCL a rank
    blocks in a CUDA synchronisation (``.item()``, ``torch.cuda.synchronize``), not in the
    collective's Python call, which returned at once: its dump is what says it waits for its peers.
    On gloo the call, or its work's ``wait()``, blocks where the stack shows it, so a queued gloo
    collective (an FSDP prefetch not yet waited for) says nothing of a rank stuck in user code."""
    out = {}
    for rank, record in records.items():
        waiting = [g.waiting_in for g in record.groups.values()
                   if g.waiting_in and g.waiting_in.split(":", 1)[0] in ASYNC_BACKENDS]
        if waiting:
            out[rank] = waiting[0]
    return out


def ranks_behind(counts: Mapping[int, int]) -> list[int]:
    """The ranks whose count is below the highest, the furthest behind first (then by rank)."""
    if not counts:
        return []
    top = max(counts.values())
    return sorted((r for r, c in counts.items() if c < top), key=lambda r: (counts[r], r))


__all__ = ["FlightRecord", "GroupProgress", "as_int", "choose_group", "counts_from_dumps",
           "parse_dumps", "parse_flight_recorder", "pending_collectives", "rank_from_name",
           "ranks_behind"]
