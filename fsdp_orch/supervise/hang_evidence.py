"""What a failure's evidence adds about where the ranks were: the culprit first (``culprit.py``),
the stuck ranks' innermost frames of user code (from stack dumps the attempt's handle took before
the attempt is stopped) and flight-recorder dumps (NCCL's or gloo's)."""

from __future__ import annotations

import dataclasses
import posixpath
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fsdp_orch.decide.watchdog import HangVerdict
from fsdp_orch.observe import command
from fsdp_orch.observe.attempt_files import FLIGHT_RECORDER_REQUEST
from fsdp_orch.observe.collective_counts import (
    FlightRecord,
    counts_from_dumps,
    parse_dumps,
    pending_collectives,
)
from fsdp_orch.observe.command import Runner
from fsdp_orch.observe.nccl_env import FLIGHT_RECORDER_PREFIX
from fsdp_orch.observe.nccl_ras import parse_ras_status
from fsdp_orch.observe.stacks import StackCapture
from fsdp_orch.observe.user_frame import default_library_roots, describe_stuck
from fsdp_orch.supervise.culprit import culprit_order, frozen_headline, headline, place_of
from fsdp_orch.supervise.diagnose import Diagnosis

NAMED_RANKS = 3  # the evidence names this many stuck ranks' frames, the culprit first


@dataclass(frozen=True)
class HangExplanation:
    # the culprit's line first, then the watchdog's timing, frames and the stacks' folder
    evidence: str
    stacks: str | None  # the folder of the stacks (None when no stack could be taken)
    order: list[int]  # the hung ranks, the culprit first


@dataclass(frozen=True)
class FlightRecords:
    """What the hung ranks' flight-recorder dumps say: each rank's collective count (where two or
    more ranks' dumps could be compared) and the collective each
    rank has queued and not finished."""

    counts: dict[int, int] = dataclasses.field(default_factory=dict)
    pending: dict[int, str] = dataclasses.field(default_factory=dict)


def explain_hang(verdict: HangVerdict, capture: StackCapture,
                 collective_counts: dict[int, int] | None = None,
                 library_roots: tuple[str, ...] | None = None,
                 pending: dict[int, str] | None = None) -> HangExplanation:
    """The hang's evidence: which rank is the culprit and what the others wait in (from their
    stacks and ``pending``, the collective a rank's flight recorder has queued and not finished,
    then ``collective_counts``, then the watchdog's timing), then the watchdog's own words and the
    culprit-first frames."""
    timing = list(verdict.suspects or verdict.ranks)
    if not capture.dumps:
        lead = f"{frozen_headline(verdict.frozen, timing, {})}; " if verdict.frozen else ""
        return HangExplanation(f"{lead}{verdict.evidence}; "
                               f"{capture.note or 'no stacks could be taken'}", None, timing)
    roots = library_roots or default_library_roots()
    places = {rank: place_of(rank, dump.threads, roots, saving=rank in verdict.saving,
                             pending=(pending or {}).get(rank))
              for rank, dump in capture.dumps.items() if rank in timing and dump.threads}
    order = culprit_order(places, timing, collective_counts)
    if verdict.frozen:  # a frozen process is the culprit wherever its stack stands
        order = [r for r in timing if r in verdict.frozen] + [r for r in order
                                                              if r not in verdict.frozen]
    named = [describe_stuck(rank, capture.dumps[rank].threads, roots)
             for rank in order if rank in places][:NAMED_RANKS]
    if not named:
        errors = sorted({d.error for d in capture.dumps.values() if d.error})
        lead = f"{frozen_headline(verdict.frozen, timing, {})}; " if verdict.frozen else ""
        return HangExplanation(f"{lead}{verdict.evidence}; no stacks could be taken "
                               f"({'; '.join(errors) or 'no dump'})", None, timing)
    culprit = (frozen_headline(verdict.frozen, order, places) if verdict.frozen
               else headline(order, places, collective_counts))
    parts = [culprit] if culprit else []
    parts += [verdict.evidence, *named, f"stacks: {capture.folder}"]
    return HangExplanation("; ".join(parts), capture.folder, order)


# How long a hang verdict waits for the ranks' flight-recorder dumps
# (the bootstrap's watcher answers within its 0.5 s tick; py-spy's stacks are taken meanwhile).
FLIGHT_RECORDER_WAIT_S = 2.0


def ask_for_flight_records(attempt_dir: Path, clock: Callable[[], float]) -> float | None:
    """Ask every rank's bootstrap for its flight recorder (a file in the attempt's folder): when it
    was asked, or None where the folder cannot be written."""
    try:
        (attempt_dir / FLIGHT_RECORDER_REQUEST).write_text("dump\n")
    except OSError:
        return None
    return clock()


def flight_records(dumps: Callable[[], list[str]], ranks: list[int], asked: float,
                   clock: Callable[[], float], sleep: Callable[[float], None]) -> FlightRecords:
    """The hung ranks' flight-recorder dumps (``dumps`` lists their files: NCCL's own on a timeout,
    or the bootstrap's answers to the request), waiting up to FLIGHT_RECORDER_WAIT_S after the
    request for every hung rank's: their collective counts ({} when fewer than two ranks' can be
    read) and the collectives they have queued."""
    records: dict[int, FlightRecord] = {}
    for _ in range(int(FLIGHT_RECORDER_WAIT_S / 0.1) + 1):
        files = {}
        for path in dumps():
            try:
                files[path] = Path(path).read_bytes()
            except OSError:
                continue
        records = parse_dumps(files)
        if set(ranks) <= set(records) or clock() - asked >= FLIGHT_RECORDER_WAIT_S:
            break
        sleep(0.1)
    return FlightRecords(counts_from_dumps(records) if len(records) >= 2 else {},
                         pending_collectives(records))


RAS_CLIENT = "ncclras"  # NCCL >= 2.24's RAS client: asks the job's NCCL processes on this node


def ras_counts(run: Runner = command.run,
               which: Callable[[str], str | None] = shutil.which) -> dict[int, int]:
    """Each rank's collective count as NCCL's RAS subsystem reports it (verbose status of the
    communicators whose counts differ), where its client is installed on the supervisor's node;
    {} when it is not, or says nothing usable."""
    binary = which(RAS_CLIENT)
    if binary is None:
        return {}
    result = run([binary, "-v"], 10.0)
    report = parse_ras_status(result.stdout) if result.returncode == 0 else None
    return report.counts() if report is not None else {}


def with_flight_recorder(diagnosis: Diagnosis, dumps: list[str]) -> Diagnosis:
    """Point the evidence at the flight recorder's dumps, when the ranks wrote any (NCCL's own on a
    timeout, or every rank's on a hang verdict's request); a hang's stacks folder stays last."""
    if not dumps:
        return diagnosis
    where = posixpath.join(posixpath.dirname(dumps[0]), FLIGHT_RECORDER_PREFIX)
    note = f"flight recorder dumps ({len(dumps)}): {where}*"
    if not diagnosis.evidence:
        return dataclasses.replace(diagnosis, evidence=note)
    head, sep, stacks = diagnosis.evidence.rpartition("; stacks: ")
    evidence = f"{head}; {note}{sep}{stacks}" if sep else f"{diagnosis.evidence}; {note}"
    return dataclasses.replace(diagnosis, evidence=evidence)
