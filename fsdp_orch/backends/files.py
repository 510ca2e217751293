"""Observing an attempt through files the supervisor can read: the kinds whose nodes share a
filesystem with it (this machine; a SLURM cluster's shared run directory)."""

from __future__ import annotations

import socket
from pathlib import Path

from fsdp_orch.backends.base import EngineEnding
from fsdp_orch.checkpoints.storage import LOCAL, Storage
from fsdp_orch.observe.attempt_files import LOG_PATTERNS, STACKS_DIR
from fsdp_orch.observe.file_tail import FileTail, LogChunk
from fsdp_orch.observe.heartbeats import Heartbeat, read_heartbeats
from fsdp_orch.observe.nccl_env import FLIGHT_RECORDER_PREFIXES
from fsdp_orch.observe.stacks import StackCapture, capture_stacks


class FileObservation:
    """Heartbeats, logs, checkpoints, stacks and flight-recorder dumps read from local paths."""

    def __init__(self, run_dir: Path, attempt: int, attempt_dir: Path,
                 log_patterns: tuple[str, ...] = LOG_PATTERNS):
        self.run_dir = run_dir
        self.attempt = attempt
        self.attempt_dir = attempt_dir
        self._tail = FileTail(attempt_dir, log_patterns)

    def close(self) -> None:
        """Release what watching the attempt held (its node channel); nothing here."""

    @property
    def checkpoints(self) -> Storage:
        return LOCAL

    def heartbeats(self) -> dict[int, Heartbeat]:
        return read_heartbeats(self.run_dir, self.attempt)

    def log_chunks(self) -> list[LogChunk]:
        return self._tail.chunks()

    def capture_stacks(self, beats: dict[int, Heartbeat]) -> StackCapture:
        """py-spy (the bootstrap's faulthandler as the fallback) on the ranks of this host."""
        here = socket.gethostname()
        pids = {rank: beat.pid for rank, beat in beats.items() if beat.host in (None, here)}
        if not pids:
            return StackCapture({}, None,
                                "no rank runs on the supervisor's host, so no stacks were taken")
        folder = self.attempt_dir / STACKS_DIR
        return StackCapture(capture_stacks(pids, folder), str(folder))

    def lost_node(self) -> str | None:
        return None  # the nodes share this filesystem: their loss shows in the scheduler's records

    def lost_hosts(self) -> tuple[str, ...]:
        return ()

    def left_out_name(self, node: int | None, host: str | None) -> str | None:
        return host  # what the node's agent calls its host: the scheduler's name for it

    def silent_nodes(self) -> dict[int, float]:
        return {}  # the heartbeats are read from the run folder: no channel to fall silent

    def ended_by(self) -> EngineEnding | None:
        return None  # the ranks' logs and exit status tell

    def waiting_for(self) -> str | None:
        return None  # the scheduler's queue is the job's, before any attempt

    def refused_connections(self) -> dict[str, int]:
        return {}  # no channel that strangers could reach

    def node_notes(self) -> dict[int, str]:
        return {}  # no channel to carry them

    def flight_recorder_dumps(self) -> list[str]:
        return sorted(str(p) for prefix in FLIGHT_RECORDER_PREFIXES
                      for p in self.attempt_dir.glob(f"{prefix}*"))
