"""Observing an attempt through its node agents (local, SLURM): every node's agent streams one
summary of its ranks to the server this attempt opens; logs, checkpoints and flight-recorder dumps
are still read from the run folder the nodes share with the supervisor."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

from fsdp_orch.backends.base import CHANNEL_SILENT_S
from fsdp_orch.backends.files import FileObservation
from fsdp_orch.nodeagent.endpoint import write_endpoint
from fsdp_orch.nodeagent.server import SummaryServer
from fsdp_orch.nodeagent.summary import dump_from_wire
from fsdp_orch.observe.attempt_files import LOG_PATTERNS, STACKS_DIR
from fsdp_orch.observe.file_tail import LogChunk
from fsdp_orch.observe.heartbeats import Heartbeat
from fsdp_orch.observe.stacks import StackCapture
from fsdp_orch.vocab.categories import NODE_LOST_EXIT

log = logging.getLogger(__name__)
SETTLE_S = 3.0  # after the launchers ended: how long the agents' last lines may take


class AgentObservation(FileObservation):
    """``bind``: the address the server listens on; ``announce``: the one the agents connect to."""

    def __init__(self, run_dir: Path, attempt: int, attempt_dir: Path, bind: str, announce: str,
                 node_timeout: float, log_patterns: tuple[str, ...] = LOG_PATTERNS):
        """``log_patterns``: the logs read from the run folder; the rest come from the agents
        (nodeagent.node_logs)."""
        super().__init__(run_dir, attempt, attempt_dir, log_patterns)
        token = secrets.token_hex(16)
        self.channel = SummaryServer(token, host=bind, node_timeout=node_timeout)
        port = self.channel.start()
        write_endpoint(str(attempt_dir), announce, port, token)

    def heartbeats(self) -> dict[int, Heartbeat]:
        return self.channel.heartbeats()

    def log_chunks(self) -> list[LogChunk]:
        return self._tail.chunks() + self.channel.log_chunks()

    def capture_stacks(self, beats: dict[int, Heartbeat]) -> StackCapture:
        """py-spy on every node at once, each agent on its own ranks."""
        folder = self.attempt_dir / STACKS_DIR
        replies = self.channel.capture_stacks({rank: beat.pid for rank, beat in beats.items()},
                                              str(folder))
        dumps = {}
        for reply in replies.values():
            for rank, wire in (reply.get("dumps") or {}).items():
                dumps[int(rank)] = dump_from_wire(wire)
        if not dumps:
            return StackCapture({}, None, "no node agent answered with stacks")
        return StackCapture(dict(sorted(dumps.items())), str(folder))

    def lost_node(self) -> str | None:
        return self.channel.lost_node()

    def silent_nodes(self) -> dict[int, float]:
        return self.channel.silent_nodes(CHANNEL_SILENT_S)

    def refused_connections(self) -> dict[str, int]:
        return self.channel.refused_connections()

    def node_notes(self) -> dict[int, str]:
        return self.channel.node_notes()

    def judge_exit(self, code: int | None) -> int | None:
        """The attempt's exit code as the launcher gave it (``code``), once the agents' last lines
        are in (the ranks' final states); while it runs, NODE_LOST_EXIT when a node's agent went
        silent past the node timeout, else None."""
        if code is None:
            lost = self.lost_node()
            if lost is None:
                return None
            log.info(f"fsdp-orch supervisor: {lost}")
            return NODE_LOST_EXIT
        self.channel.settle(SETTLE_S)
        return code

    def stop_ranks(self, grace: float) -> None:
        self.channel.stop_ranks(grace)

    def close(self) -> None:
        self.channel.close()
