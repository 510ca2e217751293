"""Which rank is behind in its collectives, read from NCCL RAS's status output. Pure: the caller
passes the text.

RAS (NCCL >= 2.24, ``ncclras`` or ``echo verbose status | nc localhost 28028``). The text
names a rank's count only where it lists the rank: RAS prints each group of ranks sharing a count
("26 ranks have launched up to operation 6650") but lists the members only of a group it calls an
outlier (<= 25% and <= 10 ranks; verbose: < 50%). An unlisted group's ranks are inferred only when
they are all the rest. Its ranks are communicator ranks (the global rank only in a communicator of
every rank); each listed rank also carries its pid and node. The JSON output (NCCL >= 2.28.7) gives
every rank's counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsdp_orch.observe.collective_counts import as_int


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
_RANK_INFO = (r"(?:GPU (?P<gpu>.+?) managed by process (?P<pid>\d+) on node (?P<node>\S+)|"
              r"\[process information not found\])")
_RANK_LINE = re.compile(r"\s+Rank (?P<rank>\d+) -- " + _RANK_INFO)
_RANK_COUNT = re.compile(r"\s+Rank (?P<rank>\d+) has (?:launched up to operation (?P<op>\d+)|"
                         r"not launched any operations) -- " + _RANK_INFO)
_DIFFERENT = re.compile(r"\s+Communicator ranks have different (\S+) operation counts")
_GROUP = re.compile(r"\s+(\d+) ranks have (?:launched up to operation (\d+)|"
                    r"not launched any operations)")
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
        elif ((m := _RANK_COUNT.fullmatch(line)) is not None and comm is not None
                and mode == "counts"):
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
    return RasRank(int(r["rank"]), as_int(r.get("pid")), r.get("host"), str(r.get("cuda_dev")))


def _parse_json(doc: Any) -> RasReport | None:
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators"), list):
        return None
    comms = []
    for i, c in enumerate(doc["communicators"]):
        ranks = [r for r in c.get("ranks", [])
                 if isinstance(r, dict) and as_int(r.get("rank")) is not None]
        kinds = sorted({k for r in ranks for k in (r.get("collective_counts") or {})})
        groups = []
        for kind in kinds:
            values = {as_int(r["rank"]): as_int((r.get("collective_counts") or {}).get(kind)) or 0
                      for r in ranks}
            if len(set(values.values())) > 1:
                for op in sorted(set(values.values()), reverse=True):
                    members = tuple(_json_rank(r) for r in ranks if values[as_int(r["rank"])] == op)
                    groups.append(RasCountGroup(kind, op, len(members), members))
        missing = [_json_rank(r) for r in c.get("missing_ranks", [])
                   if isinstance(r, dict) and as_int(r.get("rank")) is not None]
        problems = (("MISMATCH",) if groups else ()) + (("INCOMPLETE",) if missing else ())
        comms.append(RasCommunicator(f"#{i}", str(c.get("hash", "")), as_int(c.get("size")),
                                     problems, tuple(groups), len(missing), tuple(missing)))
    ras = doc.get("ras")
    if not isinstance(ras, dict):
        ras = {}
    return RasReport(tuple(comms), (), (), as_int(ras.get("timeouts_count")) or 0, json=True)


def parse_ras_status(text: str) -> RasReport | None:
    """RAS's status output (text, or JSON from ``-f json``); None when ``text`` is neither."""
    try:
        if text.lstrip().startswith("{"):
            return _parse_json(json.loads(text))
        return _parse_text(text)
    except Exception:  # text from a socket: a cut or foreign reply is no report
        return None


__all__ = ["RasCommunicator", "RasCountGroup", "RasProcess", "RasRank", "RasReport",
           "parse_ras_status"]
