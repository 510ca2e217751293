"""What a failure's evidence adds about where the ranks were: the stuck ranks' innermost frames of
user code (from stack dumps the attempt's handle took before the attempt is stopped) and NCCL
flight-recorder dumps."""

from __future__ import annotations

import dataclasses
import posixpath

from fsdp_orch.observe.nccl_env import FLIGHT_RECORDER_PREFIX
from fsdp_orch.observe.stacks import StackCapture, default_library_roots, describe_stuck
from fsdp_orch.supervise.diagnose import Diagnosis
from fsdp_orch.supervise.watchdog import HangVerdict

NAMED_RANKS = 3  # the evidence names this many stuck ranks, the first to stop first


def stuck_ranks_evidence(verdict: HangVerdict, capture: StackCapture) -> tuple[str, str | None]:
    """The text to append to the hang's evidence, and the folder of the stacks (None when no stack
    could be taken)."""
    if not capture.dumps:
        return f"; {capture.note or 'no stacks could be taken'}", None
    roots = default_library_roots()
    named = []
    for rank in verdict.suspects or verdict.ranks:
        dump = capture.dumps.get(rank)
        if dump is not None and dump.threads:
            named.append(describe_stuck(rank, dump.threads, roots))
        if len(named) == NAMED_RANKS:
            break
    if not named:
        errors = sorted({d.error for d in capture.dumps.values() if d.error})
        return f"; no stacks could be taken ({'; '.join(errors) or 'no dump'})", None
    return "; " + "; ".join(named) + f"; stacks: {capture.folder}", capture.folder


def with_flight_recorder(diagnosis: Diagnosis, dumps: list[str]) -> Diagnosis:
    """Point the evidence at the NCCL flight recorder's dumps, when the ranks wrote any."""
    if not dumps:
        return diagnosis
    where = posixpath.join(posixpath.dirname(dumps[0]), FLIGHT_RECORDER_PREFIX)
    note = f"NCCL flight recorder dumps ({len(dumps)}): {where}*"
    evidence = f"{diagnosis.evidence}; {note}" if diagnosis.evidence else note
    return dataclasses.replace(diagnosis, evidence=evidence)
