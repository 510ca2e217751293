"""What a local job listens on (issue 42, item 9): its rendezvous host is 127.0.0.1, so nothing of
it listens on any other interface. torch's TCPStore server listens on every interface whatever its
clients are told (it did: ``*:PORT``, seen with ``ss -ltn`` during the demo); the store fsdp-orch
hosts (the warm standby's) and the one torchrun's agent hosts (cold starts) are bound to the
rendezvous address (fsdp_orch/bootstrap/store_bind.py). Real torchrun, real gloo, the sockets read
from /proc while the job trains."""

from __future__ import annotations

import ipaddress
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cli_harness import REPO, UNTIL_STOPPED, copy_demo, demo_args, make_cli

pytestmark = pytest.mark.slow

LISTEN = "0A"


def listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on (TCP, IPv4 and IPv6)."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1]
                  for fd in os.listdir(f"/proc/{pid}/fd")
                  if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")}
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return set()
    found = set()
    for table, size in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != LISTEN or fields[9] not in inodes:
                continue
            hex_address, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_address)
            # /proc prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))
            found.add((str(ipaddress.ip_address(raw)), int(hex_port, 16)))
    return found


def job_pids(job_id: str) -> list[int]:
    wanted = f"FSDP_ORCH_JOB_ID={job_id}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if wanted in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    pids.append(int(entry))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
    return pids


def test_a_local_job_listens_on_loopback_alone_under_every_launcher(tmp_path: Path) -> None:
    """Four jobs side by side, each sampled once it trains, then cancelled (the cancels side by side
    too): torchrun from the warm standby (the keeper's store) and cold (torchrun's rendezvous store
    and the store it serves its ranks), accelerate (torchrun's static rendezvous), and the python
    launcher with mp.spawn (``init_process_group``'s env:// store on rank 0)."""
    cli = make_cli(tmp_path)
    demo = copy_demo(tmp_path)
    spawn = tmp_path / "spawn"
    shutil.copytree(REPO / "examples" / "launchers" / "spawn", spawn,
                    ignore=shutil.ignore_patterns("checkpoints", "__pycache__"))
    # one rank where the launcher allows it (accelerate --multi_gpu needs 2): the stores are the
    # same for one rank as for many, and the suite shares 2 cores
    one = "procs_per_node=1"
    jobs = {"torchrun, warm standby": (demo, [demo_args(*UNTIL_STOPPED), one]),
            "torchrun, cold": (demo, [demo_args(*UNTIL_STOPPED), "launch.standby=off", one]),
            "accelerate": (demo, [demo_args(*UNTIL_STOPPED), "launcher=accelerate"]),
            "python, mp.spawn": (spawn / "job.yaml", ['args=["--steps", "100000"]',
                                                      "checkpoint.interval=100000", one])}
    ids = {}
    # A job is cancelled as soon as its sockets are read, in the background: a cancel waits for the
    # job's supervisor and every process of it to end (6-19 s each in the loaded suite), and one
    # after another they were half the test's time. Every cancel has ended before the test does.
    cancels = ThreadPoolExecutor(max_workers=len(jobs))
    try:
        for name, (job, sets) in jobs.items():
            argv = ["submit", "--cluster", "local", str(job)]
            for item in sets:
                argv += ["--set", item]
            ids[name] = cli.run(*argv, check=True).stdout.split()[-1]
        cancelled = []
        for name, job_id in ids.items():
            status = cli.wait_until(job_id, lambda s: (s.get("progress") or {}).get("step", 0) >= 2
                                    or s["state"] not in ("PENDING", "RUNNING"),
                                    timeout=300, what=f"{name} training")
            assert status["state"] == "RUNNING", f"{name}: {status.get('reason')}"
            seen = {pid: listening(pid) for pid in job_pids(job_id)}
            sockets = {pair for pairs in seen.values() for pair in pairs}
            assert sockets, f"{name}: nothing of job {job_id} listens; its store must ({seen})"
            elsewhere = {pair for pair in sockets
                         if not ipaddress.ip_address(pair[0]).is_loopback}
            assert not elsewhere, f"{name}: job {job_id} listens beyond loopback: {elsewhere}"
            cancelled.append(cancels.submit(cli.run, "cancel", job_id, check=True))
        for done in cancelled:
            done.result()  # each exited 0
    finally:
        for job_id in ids.values():
            cancels.submit(cli.run, "cancel", job_id)  # a job whose check failed, or not sampled
        cancels.shutdown(wait=True)
