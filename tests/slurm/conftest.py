"""The real SLURM test cluster (``tests/slurm/cluster.sh``) as a session fixture.

``slurm_cluster`` installs the Debian packages the first time (root + apt-get), starts munge,
MariaDB, slurmdbd, slurmctld and three slurmd (node1, node2, node3; partitions ``debug`` and
``urgent``), puts the exported variables (``SLURM_CONF``) into ``os.environ`` for the session,
and stops what it started at the end. A cluster that was already running is reused and left
running. It skips only where the machine cannot run it (not root, no apt-get and no SLURM); with
``CI`` set it fails instead, so CI never skips these tests silently.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_harness import Cli, copy_demo
from machine_services import service

CLUSTER_SH = Path(__file__).resolve().with_name("cluster.sh")
# A 2-core machine, a loaded CI runner: slow enough never to be the flaky part, bounded still.
START_TIMEOUT_S = 900
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def why_it_cannot_run() -> str | None:
    """Why this machine cannot run the test cluster, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"the test SLURM cluster needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return ("the test SLURM cluster needs root (it installs packages and runs munged, "
                "slurmd, MariaDB)")
    if (shutil.which("apt-get") is None
        and shutil.which("slurmctld", path=os.environ.get("PATH", "") + ":/usr/sbin") is None):
        return "SLURM is not installed and there is no apt-get to install it"
    return None


@dataclass(frozen=True)
class SlurmCluster:
    """The running test cluster: its state directory, its environment, and small helpers that
    drive the real client commands (``SLURM_CONF`` is in ``os.environ`` while it runs)."""

    dir: Path
    env: dict[str, str]
    nodes: tuple[str, ...] = ("node1", "node2", "node3")

    def run(self, *argv: str, check: bool = True, timeout: float = 60,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd)
        if check and proc.returncode != 0:
            raise AssertionError(f"{shlex.join(argv)} exited {proc.returncode}\n"
                                 f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def sbatch(self, *args: str, cwd: Path) -> str:
        """Submit (``sbatch --parsable ARGS``) from ``cwd``; return the job id."""
        return self.run("sbatch", "--parsable", *args, cwd=cwd).stdout.strip().split(";")[0]

    def sacct(self, job_id: str, *fields: str, duplicates: bool = False) -> list[dict[str, str]]:
        """sacct rows for a job (``duplicates``: also the records of earlier, requeued runs)."""
        argv = ["sacct", "--parsable2", "--noheader", "-j", job_id, "-o", ",".join(fields)]
        if duplicates:
            argv.append("--duplicates")
        lines = self.run(*argv).stdout.splitlines()
        return [dict(zip(fields, line.split("|"), strict=True)) for line in lines if line]

    def state(self, job_id: str) -> str:
        """The job's state as squeue sees it (``COMPLETED`` etc. for MinJobAge after it ends)."""
        return self.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T",
                        check=False).stdout.strip()

    def accounted_state(self, job_id: str) -> str:
        """The allocation's latest state in sacct, first word only (``CANCELLED by 0``)."""
        rows = self.sacct(job_id, "JobID", "State")
        row = next((r for r in rows if r["JobID"] == job_id), None)
        return row["State"].split()[0] if row else ""

    def wait_for(self, job_id: str, states: set[str], timeout: float = 60,
                 accounted: bool = True) -> str:
        """Poll until the job's state (sacct, or squeue with ``accounted=False``) is in
        ``states``; return it. Fails with the job's details on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.accounted_state(job_id) if accounted else self.state(job_id)
            if state in states:
                return state
            if time.monotonic() > deadline:
                details = self.run("scontrol", "show", "job", job_id, check=False)
                raise AssertionError(f"job {job_id} is {state or 'unknown'}, not {sorted(states)}, "
                                     f"after {timeout}s\n{details.stdout}{details.stderr}")
            time.sleep(0.5)

    def wait_done(self, job_id: str, timeout: float = 60) -> str:
        return self.wait_for(job_id, TERMINAL, timeout)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Start (or reuse) the test cluster for the session; see the module docstring."""
    with service(CLUSTER_SH, "the test SLURM cluster", why_it_cannot_run(), ("start",), ("stop",),
                 START_TIMEOUT_S, 180) as env:
        assert "SLURM_CONF" in env, f"cluster.sh start printed no SLURM_CONF: {env}"
        with pytest.MonkeyPatch.context() as mp:
            for name, value in env.items():
                mp.setenv(name, value)
            yield SlurmCluster(dir=Path(env.get("FSDP_ORCH_SLURM_DIR",
                                                Path(env["SLURM_CONF"]).parents[1])),
                               env=env)


# --- login nodes kept apart -----------------------------------------------------------------------

class LoginNode:
    """A login node: a process holding its own mount namespace, with a private tmpfs mounted on
    ``home`` that nothing outside it (slurmd and the job steps it starts) can see. The CLI runs in
    it through ``nsenter``; only ``shared`` (the profile's ``shared_dir``) is seen by both sides."""

    def __init__(self, base: Path, shared: Path):
        self.home = base / "private-home"
        self.work = base / "work"
        for folder in (self.home, self.work / "clusters", shared):
            folder.mkdir(parents=True, exist_ok=True)
        builtin = Path(__file__).resolve().parents[2] / "clusters" / "slurm.yaml"
        # python: the ranks' environment (this one: torch and fsdp-orch); the profile's default,
        # python3 on the nodes' PATH, has neither here
        (self.work / "clusters" / "slurm.yaml").write_text(builtin.read_text()
                                                           + f"shared_dir: {shared}\n"
                                                           + f"python: {sys.executable}\n")
        # absolute: tests run the CLI with a bare PATH
        self.nsenter = shutil.which("nsenter") or "nsenter"
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "bash", "-c",
             f"mount -t tmpfs -o mode=700 tmpfs {shlex.quote(str(self.home))} && echo ready && "
             "exec sleep infinity"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        assert self.holder.stdout is not None
        ready = self.holder.stdout.readline().strip()
        assert ready == "ready", f"the login node's namespace did not start: {ready!r}"
        self.cli = Cli(home=self.home, cwd=self.work,
                       # entering a mount namespace moves to its root: --wd keeps the working folder
                       prefix=(self.nsenter, f"--target={self.holder.pid}", "--mount",
                               f"--wd={self.work}", "--"))

    def inside(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """A command run on this login node (its view of the filesystem)."""
        return subprocess.run([self.nsenter, f"--target={self.holder.pid}", "--mount", "--", *argv],
                              capture_output=True, text=True, timeout=60)

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait()


@pytest.fixture
def login_nodes(tmp_path: Path):  # type: ignore[no-untyped-def]
    """``login_nodes(n)``: n login nodes apart from each other and from the compute side, sharing
    one run root (``tmp_path/shared``)."""
    made: list[LoginNode] = []

    def make(count: int = 1) -> list[LoginNode]:
        for i in range(count):
            made.append(LoginNode(tmp_path / f"login{len(made) + i}", tmp_path / "shared"))
        return made[-count:]

    yield make
    for node in made:
        node.close()


@pytest.fixture
def cli(login_nodes):  # type: ignore[no-untyped-def]
    """The CLI on a login node kept apart (overrides the top-level ``cli`` for the SLURM tests)."""
    [node] = login_nodes(1)
    return node.cli


@pytest.fixture(scope="module")
def module_cli_and_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, Path]]:
    base = tmp_path_factory.mktemp("login")
    node = LoginNode(base, base / "shared")
    yield node.cli, copy_demo(base)
    node.close()
