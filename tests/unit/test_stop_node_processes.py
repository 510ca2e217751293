"""A node agent's stop order ends its own node's processes of the attempt, and leaves the node
script to end on its own (observe.proctree.stop_job_processes with node and spare): real
processes."""

from __future__ import annotations

import os
import subprocess
import sys

from fsdp_orch.observe.proctree import stop_job_processes


def tagged(node: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FSDP_ORCH_JOB_ID": "stoptest0001", "FSDP_ORCH_ATTEMPT": "3",
           "FSDP_ORCH_NODE_RANK": str(node)}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)


def test_only_this_nodes_processes_are_stopped_and_the_spared_one_is_left():
    rank, script, other_node = tagged(0), tagged(0), tagged(1)
    try:
        killed = stop_job_processes("stoptest0001", 3, grace=5.0, spare=(script.pid,), node=0)
        assert killed == []  # SIGTERM was enough
        assert rank.wait(timeout=10) == -15
        assert script.poll() is None and other_node.poll() is None
    finally:
        for proc in (rank, script, other_node):
            proc.kill()
            proc.wait()
