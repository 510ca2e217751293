"""What a failure's evidence adds about where the ranks were: the stuck ranks' innermost frames of
user code (from stack dumps taken before the attempt is stopped) and NCCL flight-recorder dumps."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

from fsdp_orch.attempt_files import STACKS_DIR
from fsdp_orch.heartbeats import Heartbeat
from fsdp_orch.nccl_env import FLIGHT_RECORDER_PREFIX
from fsdp_orch.supervise.diagnose import Diagnosis
from fsdp_orch.supervise.stacks import capture_stacks, default_library_roots, describe_stuck
from fsdp_orch.supervise.watchdog import HangVerdict

NAMED_RANKS = 3  # the evidence names this many stuck ranks, the first to stop first


def stuck_ranks_evidence(verdict: HangVerdict, beats: dict[int, Heartbeat], attempt_dir: Path,
                         host: str | None = None) -> tuple[str, Path | None]:
    """Dump every rank's stack that runs on this host (py-spy; the bootstrap's faulthandler as the
    fallback) into the attempt's stacks folder. Returns the text to append to the hang's evidence
    and the folder, None when no stack could be taken."""
    here = host or socket.gethostname()
    pids = {rank: beat.pid for rank, beat in beats.items() if beat.host in (None, here)}
    if not pids:
        return "; no rank runs on the supervisor's host, so no stacks were taken", None
    out_dir = attempt_dir / STACKS_DIR
    dumps = capture_stacks(pids, out_dir)
    roots = default_library_roots()
    named = []
    for rank in verdict.suspects or verdict.ranks:
        dump = dumps.get(rank)
        if dump is not None and dump.threads:
            named.append(describe_stuck(rank, dump.threads, roots))
        if len(named) == NAMED_RANKS:
            break
    if not named:
        errors = sorted({d.error for d in dumps.values() if d.error})
        return f"; no stacks could be taken ({'; '.join(errors) or 'no dump'})", None
    return "; " + "; ".join(named) + f"; stacks: {out_dir}", out_dir


def with_flight_recorder(diagnosis: Diagnosis, attempt_dir: Path) -> Diagnosis:
    """Point the evidence at the NCCL flight recorder's dumps, when the ranks wrote any."""
    dumps = sorted(attempt_dir.glob(f"{FLIGHT_RECORDER_PREFIX}*"))
    if not dumps:
        return diagnosis
    note = f"NCCL flight recorder dumps ({len(dumps)}): {attempt_dir / FLIGHT_RECORDER_PREFIX}*"
    evidence = f"{diagnosis.evidence}; {note}" if diagnosis.evidence else note
    return dataclasses.replace(diagnosis, evidence=evidence)
