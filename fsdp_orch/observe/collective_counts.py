"""Which rank is behind in its collectives, read from PyTorch's flight recorder dumps and from
NCCL RAS's status output. Pure and torch-free: the caller passes the bytes or the text.

**Flight recorder.** One dump per rank (``<prefix><rank>``; the dump itself does not name its
rank): a pickle (``_dump_nccl_trace`` / ``_dump_fr_trace``, what a timeout writes) or JSON
(``_dump_*_json``), read by an unpickler that builds plain containers and refuses every global.
Per process group: the last enqueued/started/completed collective sequence numbers (``pg_status``,
dump version >= 2.5), else derived from the entries (versions 1.x call the number ``seq_id``).
``last_started`` is -1 unless NCCL's start events exist (``TORCH_NCCL_ENABLE_TIMING``), and gloo
tracks neither start nor (for ``async_op`` work) completion: ``last_enqueued`` is the count every
backend keeps.

**RAS** (NCCL >= 2.24, ``ncclras`` or ``echo verbose status | nc localhost 28028``). The text
names a rank's count only where it lists the rank: RAS prints each group of ranks sharing a count
("26 ranks have launched up to operation 6650") but lists the members only of a group it calls an
outlier (<= 25% and <= 10 ranks; verbose: < 50%). An unlisted group's ranks are inferred only when
they are all the rest. Its ranks are communicator ranks (the global rank only in a communicator of
every rank); each listed rank also carries its pid and node. The JSON output (NCCL >= 2.28.7) gives
every rank's counts.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fsdp_orch.observe.nccl_env import FLIGHT_RECORDER_PREFIX

# --- the flight recorder -----------------------------------------------------------------------


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
    """A flight recorder dump is dicts, lists, tuples, strings and numbers: any global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name} refused")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent id refused")


def _int(value: Any) -> int | None:
    """An int, or a string of one (the JSON dump writes pg_status values as strings)."""
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
    seq = _int(entry.get("collective_seq_id", entry.get("seq_id")))
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
        enq, started, done = (_int(status.get(f"last_{k}_collective")) for k in
                              ("enqueued", "started", "completed"))
    else:  # before pg_status (dump version < 2.5): what the buffer's entries say
        enq = max((s for s, _ in seqs), default=-1)
        started = max((s for s, e in seqs if e.get("state") in ("started", "completed")), default=-1)
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
    for pg_id in sorted(set(by_pg) | set(status or ()), key=lambda p: (_int(p) is None, _int(p) or 0, p)):
        key, desc = names.get(pg_id, (f"pg{pg_id}", None))
        if key == "pg0":
            key = "0"  # pg_id 0 is the default group (created first), named "0"
        groups[key] = _progress(key, desc, None if status is None else status.get(pg_id),
                                by_pg.get(pg_id, []))
    version = dump.get("version")
    return FlightRecord(version if isinstance(version, str) else None, rank, groups, len(entries))


def parse_flight_recorder(data: bytes, rank: int | None = None) -> FlightRecord | None:
    """One rank's dump (pickle or JSON); None when ``data`` is not one. ``rank``: the file name's."""
    try:
        return _read(_load(data), rank)
    except Exception:  # a truncated, foreign or hostile file is no dump: never raise
        return None


def rank_from_name(name: str, prefix: str = FLIGHT_RECORDER_PREFIX) -> int | None:
    """The rank of a dump file named ``<prefix><rank>`` (a path's folders are ignored)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    match = re.fullmatch(re.escape(prefix) + r"(\d+)", base)
    return int(match.group(1)) if match else None


def parse_dumps(files: Mapping[str, bytes],
                prefix: str = FLIGHT_RECORDER_PREFIX) -> dict[int, FlightRecord]:
    """``{rank: record}`` of the files named ``<prefix><rank>`` that are dumps."""
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
                  key=lambda k: (k != "0", _int(k) is None, _int(k) or 0, k))
    shared = [k for k in keys if sum(k in r.groups for r in records.values()) >= 2]
    for key in shared:
        if len(set(_counts(records, key).values())) > 1:
            return key
    return "0" if "0" in keys else (shared or keys or [None])[0]


def counts_from_dumps(records: Mapping[int, FlightRecord], group: str | None = None) -> dict[int, int]:
    """``{rank: last started collective}`` in ``group`` (default: :func:`choose_group`), or the
    last enqueued one where a rank did not track starts. Ranks without the group are left out."""
    key = group if group is not None else choose_group(records)
    return {} if key is None else _counts(records, key)


# Backends whose collective's Python call returns at once, the wait coming at a device synchronisation.
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


# --- NCCL RAS ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RasRank:
    rank: int  # the rank in its communicator
    pid: int | None = None
    node: str | None = None
    gpu: str | None = None  # "5", or "5 (NVML 7)"


@dataclass(frozen=True)
class RasCountGroup:
    """Ranks that have launched the same number of operations (RAS prints them when they differ)."""

    collective: str | None  # "AllReduce" (NCCL >= 2.26); None: all collectives (2.24, 2.25)
    operation: int  # launched up to this operation; 0: none launched
    size: int
    ranks: tuple[RasRank, ...]  # listed, or inferred as the rest; () when RAS did not say


@dataclass(frozen=True)
class RasProcess:
    pid: int
    node: str
    gpus: str


@dataclass(frozen=True)
class RasCommunicator:
    ident: str  # "#0-0" (group 0 of the summary table, its first communicator)
    comm_hash: str
    size: int | None  # ranks per communicator, from the summary table (or the JSON)
    problems: tuple[str, ...]  # MISMATCH, INCOMPLETE, ERROR
    count_groups: tuple[RasCountGroup, ...]
    missing: int  # "Missing communicator data from N ranks"
    missing_ranks: tuple[RasRank, ...]

    def counts(self) -> dict[int, int]:
        """``{rank: operations}`` summed over the collectives whose counts differ, for the ranks
        whose count RAS gave for each of them. Comparable among ranks, not a total count."""
        kinds = {g.collective for g in self.count_groups}
        per_kind = [{r.rank: g.operation for g in self.count_groups if g.collective == kind
                     for r in g.ranks} for kind in kinds]
        known = set.intersection(*(set(k) for k in per_kind)) if per_kind else set()
        return {rank: sum(k[rank] for k in per_kind) for rank in sorted(known)}


@dataclass(frozen=True)
class RasReport:
    communicators: tuple[RasCommunicator, ...]
    unresponsive: tuple[RasProcess, ...]  # "Missing communicator data from N job processes"
    dead: tuple[RasProcess, ...]  # "considered dead (unreachable via the RAS network)"
    timeouts: int
    json: bool

    def counts(self) -> dict[int, int]:
        """:meth:`RasCommunicator.counts` of the largest communicator whose counts differ."""
        differing = [c for c in self.communicators if c.count_groups]
        if not differing:
            return {}
        return max(differing, key=lambda c: c.size or len(c.counts())).counts()


_COMM = re.compile(r"#(\d+)-(\d+) \(([0-9a-fA-Fx]+)\) ([A-Z,]+)")
_TABLE_ROW = re.compile(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)")
_RANK_INFO = r"(?:GPU (?P<gpu>.+?) managed by process (?P<pid>\d+) on node (?P<node>\S+)|\[process information not found\])"
_RANK_LINE = re.compile(r"\s+Rank (?P<rank>\d+) -- " + _RANK_INFO)
_RANK_COUNT = re.compile(r"\s+Rank (?P<rank>\d+) has (?:launched up to operation (?P<op>\d+)|"
                         r"not launched any operations) -- " + _RANK_INFO)
_DIFFERENT = re.compile(r"\s+Communicator ranks have different (\S+) operation counts")
_GROUP = re.compile(r"\s+(\d+) ranks have (?:launched up to operation (\d+)|not launched any operations)")
_MISSING = re.compile(r"\s+Missing communicator data from (\d+) (rank|job process)(?:e?s)?")
_MISSING_LIST = re.compile(r"\s+The missing ranks?: ([\d,\s]+)")
_PROCESS = re.compile(r"\s+Process (\d+) on node (\S+) managing GPUs? (.+)")
_TIMEOUTS = re.compile(r"\s+Encountered (\d+) communication timeouts?")


def _rank(m: re.Match[str]) -> RasRank:
    pid = m.group("pid")
    return RasRank(int(m.group("rank")), int(pid) if pid else None, m.group("node"), m.group("gpu"))


class _Comm:
    """A communicator's blocks as they are read (a MISMATCH and an INCOMPLETE one may both come)."""

    def __init__(self, ident: str, comm_hash: str, size: int | None):
        self.ident, self.comm_hash, self.size = ident, comm_hash, size
        self.problems: list[str] = []
        self.groups: list[list[Any]] = []  # [collective, operation, size, [RasRank]]
        self.missing = 0
        self.missing_ranks: list[RasRank] = []

    def build(self) -> RasCommunicator:
        missing = {r.rank for r in self.missing_ranks}
        groups = []
        for kind in dict.fromkeys(g[0] for g in self.groups):
            same = [g for g in self.groups if g[0] == kind]
            unlisted = [g for g in same if not g[3]]
            if len(unlisted) == 1 and self.size is not None and len(missing) == self.missing:
                listed = {r.rank for g in same for r in g[3]}
                rest = [r for r in range(self.size) if r not in listed and r not in missing]
                if len(rest) == unlisted[0][2]:
                    unlisted[0][3] = [RasRank(r) for r in rest]
            groups += [RasCountGroup(k, op, n, tuple(ranks)) for k, op, n, ranks in same]
        return RasCommunicator(self.ident, self.comm_hash, self.size, tuple(self.problems),
                               tuple(groups), self.missing, tuple(self.missing_ranks))


def _parse_text(text: str) -> RasReport | None:
    sizes: dict[int, int] = {}
    comms: dict[str, _Comm] = {}
    unresponsive: list[RasProcess] = []
    dead: list[RasProcess] = []
    timeouts = 0
    comm: _Comm | None = None
    comm_kind: str | None = None
    mode = ""  # what the indented lines below belong to: counts, status, missing, processes, dead
    seen = False
    for line in text.splitlines():
        if not line.strip():
            continue
        if (row := _TABLE_ROW.fullmatch(line)) is not None:
            sizes[int(row.group(1))] = int(row.group(5))
            seen = True
        elif (m := _COMM.fullmatch(line.strip())) is not None:
            ident = f"#{m.group(1)}-{m.group(2)}"
            comm = comms.setdefault(ident, _Comm(ident, m.group(3), sizes.get(int(m.group(1)))))
            comm.problems += [p for p in m.group(4).split(",") if p not in comm.problems]
            mode, seen = "", True
        elif not line.startswith(" "):  # a section or an Errors/Warnings heading
            comm, mode = None, {"INCOMPLETE": "processes", "DEAD": "dead"}.get(line.strip(), "")
            seen = seen or line.strip() in ("Job summary", "Errors", "Warnings") \
                or line.startswith("Communicators...")
        elif (m := _DIFFERENT.fullmatch(line)) is not None and comm is not None:
            kind = m.group(1)
            mode, comm_kind = "counts", (None if kind == "collective" else kind)
        elif line.strip() == "Communicator ranks have different status":
            mode = "status"
        elif (m := _GROUP.fullmatch(line)) is not None and comm is not None and mode == "counts":
            comm.groups.append([comm_kind, int(m.group(2) or 0), int(m.group(1)), []])
        elif (m := _RANK_COUNT.fullmatch(line)) is not None and comm is not None and mode == "counts":
            comm.groups.append([comm_kind, int(m.group("op") or 0), 1, [_rank(m)]])
        elif (m := _RANK_LINE.fullmatch(line)) is not None and comm is not None:
            if mode == "counts" and comm.groups:
                comm.groups[-1][3].append(_rank(m))
            elif mode == "missing":
                comm.missing_ranks.append(_rank(m))
        elif (m := _MISSING.fullmatch(line)) is not None:
            if comm is not None and m.group(2) == "rank":
                comm.missing, mode = int(m.group(1)), "missing"
        elif (m := _MISSING_LIST.fullmatch(line)) is not None and comm is not None:
            comm.missing_ranks += [RasRank(int(r)) for r in re.findall(r"\d+", m.group(1))]
        elif (m := _PROCESS.fullmatch(line)) is not None and mode in ("processes", "dead"):
            (dead if mode == "dead" else unresponsive).append(
                RasProcess(int(m.group(1)), m.group(2), m.group(3)))
        elif (m := _TIMEOUTS.match(line)) is not None:
            timeouts = int(m.group(1))
    if not seen:
        return None
    for c in comms.values():  # a block may come before its table row was read (an excerpt)
        c.size = c.size if c.size is not None else sizes.get(int(c.ident[1:].split("-")[0]))
    return RasReport(tuple(c.build() for c in comms.values()), tuple(unresponsive), tuple(dead),
                     timeouts, json=False)


def _json_rank(r: Mapping[str, Any]) -> RasRank:
    return RasRank(int(r["rank"]), _int(r.get("pid")), r.get("host"), str(r.get("cuda_dev")))


def _parse_json(doc: Any) -> RasReport | None:
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators"), list):
        return None
    comms = []
    for i, c in enumerate(doc["communicators"]):
        ranks = [r for r in c.get("ranks", []) if isinstance(r, dict) and _int(r.get("rank")) is not None]
        kinds = sorted({k for r in ranks for k in (r.get("collective_counts") or {})})
        groups = []
        for kind in kinds:
            values = {_int(r["rank"]): _int((r.get("collective_counts") or {}).get(kind)) or 0
                      for r in ranks}
            if len(set(values.values())) > 1:
                for op in sorted(set(values.values()), reverse=True):
                    members = tuple(_json_rank(r) for r in ranks if values[_int(r["rank"])] == op)
                    groups.append(RasCountGroup(kind, op, len(members), members))
        missing = [_json_rank(r) for r in c.get("missing_ranks", [])
                   if isinstance(r, dict) and _int(r.get("rank")) is not None]
        problems = (("MISMATCH",) if groups else ()) + (("INCOMPLETE",) if missing else ())
        comms.append(RasCommunicator(f"#{i}", str(c.get("hash", "")), _int(c.get("size")), problems,
                                     tuple(groups), len(missing), tuple(missing)))
    ras = doc.get("ras") if isinstance(doc.get("ras"), dict) else {}
    return RasReport(tuple(comms), (), (), _int(ras.get("timeouts_count")) or 0, json=True)


def parse_ras_status(text: str) -> RasReport | None:
    """RAS's status output (text, or JSON from ``-f json``); None when ``text`` is neither."""
    try:
        if text.lstrip().startswith("{"):
            return _parse_json(json.loads(text))
        return _parse_text(text)
    except Exception:  # text from a socket: a cut or foreign reply is no report
        return None


__all__ = ["FlightRecord", "GroupProgress", "RasCommunicator", "RasCountGroup", "RasProcess",
           "RasRank", "RasReport", "choose_group", "counts_from_dumps", "parse_dumps",
           "parse_flight_recorder", "parse_ras_status", "rank_from_name", "ranks_behind"]
