"""The node agent's process, started by a node's launch script beside its launcher:

    python -m fsdp_orch.nodeagent NODE_RANK LAUNCHER_PID

Reads ``FSDP_ORCH_BEAT_DIR`` (its ranks' heartbeats), ``FSDP_ORCH_ATTEMPT_DIR`` (where the
supervisor announces itself: ``agent.json``), ``FSDP_ORCH_JOB_ID`` and ``FSDP_ORCH_ATTEMPT`` (which
processes are its ranks). Ends after its last line, once the launcher has ended, or on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from fsdp_orch.nodeagent.agent import NodeAgent
from fsdp_orch.nodeagent.beat_dir import read_beat_files, remove_earlier_attempts
from fsdp_orch.nodeagent.endpoint import read_endpoint
from fsdp_orch.nodeagent.node_logs import NodeLogs
from fsdp_orch.nodeagent.summary import dump_to_wire
from fsdp_orch.observe.process_state import ProcessStates, parse_stat_state


def process_alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = parse_stat_state(f.read())
        if state is None:
            raise OSError(f"/proc/{pid}/stat: no state")
        return state != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def main(argv: list[str]) -> int:
    node, launcher = int(argv[0]), int(argv[1])
    beat_dir = os.environ["FSDP_ORCH_BEAT_DIR"]
    attempt_dir = os.environ["FSDP_ORCH_ATTEMPT_DIR"]
    job_id, attempt = os.environ["FSDP_ORCH_JOB_ID"], int(os.environ.get("FSDP_ORCH_ATTEMPT", "0"))

    def stop(grace: float) -> dict[str, Any]:
        from fsdp_orch.observe.proctree import stop_job_processes

        # This node's processes alone (nodes of the test cluster share a machine), less the node
        # script, which ends on its own once its launcher has: the launcher's last lines
        # (torchrun's failure summary) reach the console before the agent's last copy of it.
        return {"killed": stop_job_processes(job_id, attempt, grace=grace, spare=(launcher,),
                                             node=node)}

    def stacks(pids: dict[int, int], folder: str) -> dict[str, Any]:
        from fsdp_orch.observe.stacks import capture_stacks

        dumps = capture_stacks(pids, Path(folder))
        return {"dumps": {str(rank): dump_to_wire(dump) for rank, dump in dumps.items()}}

    # In a SLURM step, the node as SLURM names it: what a later attempt's --nodelist leaves out.
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    agent = NodeAgent(node, host, lambda: read_beat_files(beat_dir),
                      lambda: read_endpoint(attempt_dir),
                      launcher_alive=lambda: process_alive(launcher),
                      on_stop=stop, on_stacks=stacks, attempt=attempt,
                      note=os.environ.get("FSDP_ORCH_NODE_TMP_NOTE", ""),
                      logs=(NodeLogs(node, Path(beat_dir), Path(attempt_dir))
                            if os.environ.get("FSDP_ORCH_LOGS_ON_NODE") == "1" else None),
                      states=ProcessStates())

    async def run() -> None:
        def ending() -> None:
            agent.ending = True
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, ending)
        await agent.run()

    remove_earlier_attempts(job_id, attempt)
    asyncio.run(run())
    return 0


if __name__ == "__main__":
    from fsdp_orch.vocab import process_log

    process_log.setup("stderr")  # the node's console.log
    raise SystemExit(main(sys.argv[1:]))
