"""Real SSH hosts (``tests/ssh/hosts.sh``) as a session fixture.

``ssh_hosts`` installs openssh-server the first time (root + apt-get), builds three hosts, each a
network namespace with its own sshd on a bridge (10.77.0.2, .3, .4), and deletes them at the end
unless they were already up when the session began (then they are rebuilt, and left up). It skips
only where the machine cannot run them (not Linux, not root, no ``ip``, neither sshd nor apt-get);
with ``CI`` set it fails instead, so CI never skips these tests silently.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_harness import copy_demo, demo_args, make_cli
from machine_services import service

HOSTS_SH = Path(__file__).resolve().with_name("hosts.sh")
HOST_COUNT = 3
# The first run installs openssh-server on a 2-core machine that may be busy with other tests.
UP_TIMEOUT_S = 900
SBIN_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
IP = shutil.which("ip", path=SBIN_PATH) or "ip"


def why_it_cannot_run() -> str | None:
    """Why this machine cannot run the test SSH hosts, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"the test SSH hosts need Linux network namespaces (this is {sys.platform})"
    if os.geteuid() != 0:
        return "the test SSH hosts need root (they install packages, make namespaces, run sshd)"
    if shutil.which("ip", path=SBIN_PATH) is None:
        return "the test SSH hosts need the ip command (iproute2)"
    if not Path("/usr/sbin/sshd").exists() and shutil.which("apt-get") is None:
        return "openssh-server is not installed and there is no apt-get to install it"
    return None


def run(argv: list[str], check: bool, timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"{shlex.join(argv)} exited {proc.returncode}\n"
                             f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


@dataclass(frozen=True)
class SshHosts:
    """The running test hosts (host ``i`` is 0-based: address ``addresses[i]``, network namespace
    ``namespaces[i]``), the files fsdp-orch needs to reach them, and helpers that look inside."""

    dir: Path
    addresses: tuple[str, ...]
    profile: Path
    key: Path
    known_hosts: Path
    namespaces: tuple[str, ...]
    own_disks_profile: Path  # the same hosts with shared_filesystem: false
    submit_host_dir: Path  # a folder the hosts cannot see (an empty tmpfs there)

    def inside(self, i: int, *argv: str, check: bool = True,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in host ``i``'s network namespace (its network; the filesystem is
        shared)."""
        return run([IP, "netns", "exec", self.namespaces[i], *argv], check, timeout)

    def restart_sshd(self, i: int) -> None:
        """Start host ``i``'s sshd again, in a fresh mount namespace (its own disk starts empty),
        after a test killed every process of the host."""
        run(["bash", str(HOSTS_SH), "restart", str(i + 1)], check=True, timeout=60)

    def pids(self, i: int) -> list[int]:
        """Every process in host ``i``'s network namespace: its sshd and what runs through it."""
        out = run([IP, "netns", "pids", self.namespaces[i]], check=True, timeout=30).stdout
        return [int(pid) for pid in out.split()]

    def ranks_inside(self, i: int, job_id: str, attempt: int = 0) -> set[int]:
        """The ranks of the job's attempt whose process runs in host ``i``'s namespace, by the pid
        each one's heartbeat names (the hosts' node-local folders are this machine's /tmp). Not
        by a ``RANK=`` in the process's environment: a rank forked from a warm keeper has the
        keeper's there."""
        inside = set(self.pids(i))
        found = set()
        for beat in Path(f"/tmp/fsdp-orch-{os.getuid()}", job_id, f"attempt-{attempt}").glob(
                "node-*/rank-*.json"):
            try:
                data = json.loads(beat.read_text())
            except (OSError, ValueError):
                continue
            if data.get("pid") in inside:
                found.add(data["rank"])
        return found

    def job_processes(self, i: int, job_id: str) -> list[int]:
        """The processes on host ``i`` whose environment has ``FSDP_ORCH_JOB_ID=<job_id>``."""
        wanted = f"FSDP_ORCH_JOB_ID={job_id}".encode()
        found = []
        for pid in self.pids(i):
            proc = Path(f"/proc/{pid}")
            try:
                if proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
                environ = proc.joinpath("environ").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended since ip netns pids listed it
            if wanted in environ.split(b"\0"):
                found.append(pid)
        return found

    def assert_nothing_left(self, home: Path) -> None:
        """No process of any job run from the FSDP_ORCH_HOME ``home`` is left on any host."""
        runs = home / "runs"
        for job_id in (p.name for p in runs.iterdir()) if runs.is_dir() else []:
            left = {ns: self.job_processes(i, job_id) for i, ns in enumerate(self.namespaces)}
            assert not any(left.values()), f"job {job_id} left processes behind: {left}"

    def ssh(self, i: int, *command: str, check: bool = True, timeout: float = 60,
            known_hosts: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``command`` (an argv, quoted here once for the remote shell) as root on host ``i``
        with the OpenSSH client, the generated key, and host keys checked against ``known_hosts``
        (default: the generated one)."""
        argv = ["ssh", "-F", "/dev/null", "-i", str(self.key), "-o", "IdentitiesOnly=yes",
                "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={known_hosts or self.known_hosts}",
                "-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5",
                "-l", "root", self.addresses[i], "--", shlex.join(command)]
        return run(argv, check, timeout)


@pytest.fixture(scope="session")
def ssh_hosts() -> Iterator[SshHosts]:
    """Build the test hosts for the session; see the module docstring."""
    with service(HOSTS_SH, "the test SSH hosts", why_it_cannot_run(), ("up", str(HOST_COUNT)),
                 ("down",), UP_TIMEOUT_S, 120) as env:
        assert "FSDP_ORCH_SSH_DIR" in env, f"hosts.sh up printed no FSDP_ORCH_SSH_DIR: {env}"
        addresses = tuple(env["FSDP_ORCH_SSH_HOSTS"].split())
        yield SshHosts(dir=Path(env["FSDP_ORCH_SSH_DIR"]), addresses=addresses,
                       profile=Path(env["FSDP_ORCH_SSH_PROFILE"]),
                       key=Path(env["FSDP_ORCH_SSH_KEY"]),
                       known_hosts=Path(env["FSDP_ORCH_SSH_KNOWN_HOSTS"]),
                       namespaces=tuple(f"fo-h{i + 1}" for i in range(len(addresses))),
                       own_disks_profile=Path(env["FSDP_ORCH_SSH_OWN_DISKS_PROFILE"]),
                       submit_host_dir=Path(env["FSDP_ORCH_SSH_SUBMIT_HOST_DIR"]))


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], dict]:
    """The demo's result.json for ``demo_args(steps)`` by 2 ranks that were never interrupted: run
    once a session for each step count, on the local cluster (2 ranks on this machine: the same
    arithmetic as one rank on each of two hosts, bit for bit, as test_ssh_elastic's spare-host
    test also holds). Every test here runs in one worker (tests/side_by_side.py), so the tests
    that resume after a fault and compare with a run that had none share it."""
    results: dict[int, dict] = {}

    def result(steps: int) -> dict:
        if steps not in results:
            base = tmp_path_factory.mktemp(f"uninterrupted-{steps}")
            cli = make_cli(base)
            proc = cli.run("submit", "--cluster", "local", "--wait", "--json",
                           str(copy_demo(base)), "--set", "nodes=1", "--set", "procs_per_node=2",
                           "--set", "checkpoint.interval=5", "--set", demo_args(steps),
                           timeout=300)
            assert proc.stdout.strip(), proc.stderr
            status = json.loads(proc.stdout)
            assert status["state"] == "SUCCEEDED" and status["attempts"] == 1, status
            done = json.loads((Path(status["run_dir"]) / "result.json").read_text())
            assert (done["final_step"], done["world_size"], done["resumed_from"]) == (
                steps, 2, 0), done
            results[steps] = done
        return results[steps]

    return result
