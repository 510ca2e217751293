"""The keeper host: one per node of a SLURM allocation, for the job's whole life, in a job step of
its own (the batch script's ``srun --overlap``, one task per node):

    python -m fsdp_orch.standby.host JOB_ID --nproc N

An attempt's job step takes every process it started with it when it ends (proctrack/cgroup), so a
keeper an attempt prepared for the next one, as the local launcher does, would die with it. The
host keeps one keeper ready on its node at all times (``hosted_keeper_socket``: torch imported at
idle priority), spares included; an attempt's launcher claims it (``launch --hosted``), and the host
starts the next one at once. A claimed keeper forks the attempt's ranks and kills them when their
launcher goes (the attempt's step ended). The host ends with the allocation.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time

from fsdp_orch.nodeagent.beat_dir import private_beat_dir, user_tmp_root
from fsdp_orch.standby.claim import node_name, start_keeper
from fsdp_orch.standby.ranks import hosted_folder, hosted_keeper_socket, keeper_pid_file

LOOK_EVERY_S = 0.2
log = logging.getLogger(__name__)


def start(path: str, nproc: int) -> subprocess.Popen[bytes]:
    return start_keeper(path, -1, nproc, path[:-len(".sock")] + ".log", waited_on=False)


def claimed(path: str, keeper: subprocess.Popen[bytes], seen: bool) -> bool:
    """The keeper at ``path`` has ended, or was claimed: its pid file or socket was ``seen``, and
    both are gone (it removes them as a launcher claims it)."""
    return keeper.poll() is not None or (
        seen and not os.path.exists(path) and not os.path.exists(keeper_pid_file(path)))


def keep_one_ready(folder: str, nproc: int) -> None:
    started: list[subprocess.Popen[bytes]] = []
    sequence = 0
    while True:
        path = hosted_keeper_socket(folder, sequence)
        keeper = start(path, nproc)
        started.append(keeper)
        seen = ready = False
        while not claimed(path, keeper, seen):
            ready = ready or os.path.exists(path)
            seen = ready or os.path.exists(keeper_pid_file(path))
            time.sleep(LOOK_EVERY_S)
            started = [k for k in started if k.poll() is None]  # reap the ended ones
        if keeper.poll() is not None and not ready:
            log.warning(f"fsdp-orch standby host: keeper {sequence} ended before it was ready "
                        f"(exit {keeper.returncode}; {path[:-len('.sock')]}.log)")
            time.sleep(5.0)  # not a loop of failing imports
        sequence += 1


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="fsdp_orch.standby.host")
    p.add_argument("job_id")
    p.add_argument("--nproc", type=int, default=1)
    args = p.parse_args(argv)
    folder = hosted_folder(user_tmp_root(), args.job_id, node_name())
    problem = private_beat_dir(folder)
    if problem is not None:
        log.warning(f"fsdp-orch standby host: {problem}; the attempts start cold on this node")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    log.info(f"fsdp-orch standby host: keeping a keeper ready in {folder}")
    keep_one_ready(folder, args.nproc)
    return 0


__all__ = ["claimed", "keep_one_ready", "main"]

if __name__ == "__main__":
    from fsdp_orch.vocab import process_log

    process_log.setup("stderr")  # the step's standby-<node>.log
    raise SystemExit(main(sys.argv[1:]))
