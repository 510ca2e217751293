"""An attempt on an SSH cluster: every host's ``node-N.sh`` started at once over SSH, each in a
session of its own (so its whole tree can be stopped), with its exit status written beside its
console log. Starting and stopping go over SSH. The logs and exit statuses are read from files:
those of the run folder the hosts share with the supervisor, or the local mirror that
``ssh_reports`` keeps of hosts with their own disks. The heartbeats stay on each node (node-local
tmp): the attempts of ``ssh_reports`` get them from every host's report stream (one SSH channel a
host)."""

from __future__ import annotations

import logging
import posixpath
import shlex
import time
from pathlib import Path
from typing import Any, cast

from fsdp_orch.backends.files import FileObservation
from fsdp_orch.backends.over_ssh.connect import on_every_host, run_on, where
from fsdp_orch.backends.over_ssh.node_report import exit_file
from fsdp_orch.launch.plan import OWN_DISK_PACKAGE
from fsdp_orch.launch.plan_inputs import host_port
from fsdp_orch.launch.submission import Submission
from fsdp_orch.vocab.categories import NODE_LOST_EXIT

log = logging.getLogger(__name__)
# Runs a node's script and writes its exit status (also for a supervisor that re-attached); before
# the status, the command in $3 if any (the node's logs copied whole into the run folder).
NODE_WRAPPER = ('bash "$1"; code=$?; [ -z "${3:-}" ] || eval "$3"; '
                'echo "$code" > "$2.tmp" && mv -f "$2.tmp" "$2"; exit "$code"')
WRAPPER_OUTPUT = "ssh-node-*.log"  # start_command's, where the node keeps its logs
LIVENESS_EVERY_S = 5.0  # how often the hosts are asked whether the node scripts still run


def start_command(attempt_dir: str, rank: int, logs_at_end: str | None = None) -> str:
    """The shell line that starts host ``rank``'s script detached (``setsid``: its own session, not
    ended with the SSH session) and prints its pid, which is also its process group.
    ``logs_at_end``: the node keeps its logs (``nodeagent.node_logs``), and this command copies them
    into the run folder when its script ends; the wrapper's own output is ``ssh-node-N.log``."""
    script = f"{attempt_dir}/node-{rank}.sh"
    console = f"{attempt_dir}/{'ssh' if logs_at_end else 'console'}-node-{rank}.log"
    # `cd` is its own command: `cd && setsid ... &` would background a subshell, and $! be its pid
    # umask 077 before anything is created: the console log, the exit file and whatever the job
    # writes on the host are this user's alone (an SSH session's umask is usually 022).
    return (f"umask 077; cd {shlex.quote(attempt_dir)} || exit 1; "
            f"setsid bash -c {shlex.quote(NODE_WRAPPER)} fsdp-orch-node "
            f"{shlex.quote(script)} {shlex.quote(exit_file(attempt_dir, rank))} "
            f"{shlex.quote(logs_at_end) if logs_at_end else ''} "
            f">> {shlex.quote(console)} 2>&1 < /dev/null & echo $!")


def own_disk_run_dir(profile: Any, job_id: str) -> str | None:
    """The job's run folder on each host when the hosts have their own disks; None when shared."""
    if profile.shared_filesystem:
        return None
    return posixpath.join(profile.remote_workdir, "runs", job_id)  # as make_plan puts it


def host_python(profile: Any, job_id: str) -> str:
    """The shell words that run the profile's python with fsdp_orch importable (on hosts with their
    own disks, the copy sent with the job)."""
    run_dir = own_disk_run_dir(profile, job_id)
    python = shlex.quote(profile.python)
    if run_dir is None:
        return python
    return f"PYTHONPATH={shlex.quote(posixpath.join(run_dir, OWN_DISK_PACKAGE))} {python}"


def fsdp_orch_python(profile: Any, job_id: str, bootstrap_dir: str | None = None) -> str:
    """The shell words that run python with the fsdp_orch the job's ranks import: the one of the
    profile's python's own environment (``host_python``), never the submitting CLI's (its path on
    this machine: places.python_env). ``bootstrap_dir`` is not used: kept for the callers."""
    return host_python(profile, job_id)


def stop_command(python: str, job_id: str, attempt: int | None, pgid: int | None,
                 grace: float, logs_of: tuple[str, int] | None = None) -> str:
    """Stops the attempt's processes on one host: its node script's group, then every process that
    carries the job's id and attempt (torchrun starts its workers in sessions of their own).
    ``python``: shell words (``host_python``). ``logs_of``: (attempt folder, node rank) of a node
    that keeps its logs: once its processes are stopped, they are copied whole into the run folder
    (its wrapper, stopped with them, does that at a normal end)."""
    code = ("import sys; from fsdp_orch.observe.proctree import stop_job_processes; "
            "stop_job_processes(sys.argv[1], int(sys.argv[2]) if sys.argv[2] else None, "
            "grace=float(sys.argv[3]), pgid=int(sys.argv[4]) or None)")
    words = [job_id, "" if attempt is None else str(attempt), f"{grace:g}", str(pgid or 0)]
    if logs_of is not None and attempt is not None:
        code += ("; from fsdp_orch.nodeagent.node_logs import copy_at_end; "
                 "copy_at_end(sys.argv[5], sys.argv[1], int(sys.argv[2]), int(sys.argv[6]))")
        words += [logs_of[0], str(logs_of[1])]
    return python + " " + " ".join(shlex.quote(w) for w in ("-c", code, *words))


def logs_at_end_command(python: str, attempt_dir: str, job_id: str, attempt: int,
                        rank: int) -> str:
    """The shell line that copies node ``rank``'s logs whole into the run folder
    (``nodeagent.node_logs``). ``python``: shell words with fsdp_orch importable."""
    return (f"{python} -m fsdp_orch.nodeagent.node_logs "
            f"{shlex.join([attempt_dir, job_id, str(attempt), str(rank)])}")


def stop_on_host(host: Any, profile: Any, job_id: str, attempt: int | None, pgid: int | None,
                 grace: float, timeout: float | None = None, *, python: str | None = None,
                 logs_of: tuple[str, int] | None = None) -> None:
    """``stop_command`` on one host (within ``timeout``, default ``grace`` + 60 s); a host that
    cannot be reached has nothing we could stop. ``python``: shell words (default:
    ``host_python``)."""
    try:
        run_on(host, profile,
               stop_command(python or host_python(profile, job_id), job_id, attempt, pgid, grace,
                            logs_of),
               timeout=grace + 60 if timeout is None else timeout)
    except Exception:  # noqa: BLE001 - lost or refusing: nothing to stop there from here
        return


def stop_job_everywhere(ssh: Any, job_id: str, *, timeout: float = 60.0,
                        python: str | None = None) -> None:
    """Every process of the job, whatever its attempt, on every host of ``ssh`` (an ssh profile,
    or a TPU VM's workers as one) at once: a job's leftovers, or the keepers it kept between
    attempts. ``stop_on_host``'s ``python`` and ``timeout``."""
    on_every_host(list(ssh.hosts), lambda i, host: stop_on_host(
        host, ssh, job_id, None, None, 2.0, timeout=timeout, python=python))


class SshAttempt(FileObservation):
    # The nodes keep their logs (hosts that share the run folder: nodeagent.node_logs); the run
    # folder's own logs are then their wrappers' alone.
    LOGS_ON_NODE = False

    def __init__(self, submission: Submission, attempt: int, pgids: dict[int, int],
                 attempt_dir: Path | None = None, hosts: list[Any] | None = None, ssh: Any = None):
        """``attempt_dir``: where the attempt's files are read (default: the run folder the hosts
        share). ``hosts``: the profile's host of each node rank (default: the profile's first hosts;
        an attempt planned around lost hosts has others). ``ssh``: the SSH settings and hosts
        (default: the submission's ssh profile; a TPU VM's are found at launch)."""
        super().__init__(submission.run_dir, attempt,
                         attempt_dir or Path(submission.attempt_dir(attempt)),
                         **({"log_patterns": (WRAPPER_OUTPUT,)} if self.LOGS_ON_NODE else {}))
        self.submission = submission
        # an SshProfile, or a TPU VM's workers as one: what has hosts
        self.profile: Any = cast(Any, ssh or submission.profile)
        self.hosts = list(self.profile.hosts if hosts is None else hosts)  # by node rank
        self.pgids = pgids  # node rank: the process group of its node script
        self._checked_at = time.monotonic()
        self.lost: str | None = None
        self.lost_ranks: set[int] = set()  # the node ranks whose hosts stopped answering

    @property
    def ref(self) -> str:
        """``ssh:RANK=PGID@ADDRESS:PORT,...``: what a re-attached supervisor needs to find each
        node."""
        return "ssh:" + ",".join(
            f"{rank}={pgid}@{host_port(self.hosts[rank].address, self.hosts[rank].port)}"
            for rank, pgid in sorted(self.pgids.items()))

    def left_out_name(self, node: int | None, host: str | None) -> str | None:
        """The profile's host of node rank ``node`` (``address:port``), as lost hosts are named."""
        if node is None or not 0 <= node < len(self.hosts):
            return None
        return host_port(self.hosts[node].address, self.hosts[node].port)

    def lost_hosts(self) -> tuple[str, ...]:
        """The hosts (``address:port``) found lost, by node rank: later attempts are planned without
        them."""
        return tuple(host_port(self.hosts[r].address, self.hosts[r].port)
                     for r in sorted(self.lost_ranks))

    def poll(self) -> int | None:
        codes = {}
        for rank in self.pgids:
            try:
                codes[rank] = int(Path(exit_file(str(self.attempt_dir), rank)).read_text().strip())
            except (OSError, ValueError):
                continue
        failed = [code for code in codes.values() if code != 0]
        if failed:
            return failed[0]
        if len(codes) == len(self.pgids):
            return 0
        if time.monotonic() - self._checked_at >= LIVENESS_EVERY_S:
            self._checked_at = time.monotonic()
            return self._check_hosts([rank for rank in self.pgids if rank not in codes])
        return None

    def _check_hosts(self, ranks: list[int]) -> int | None:
        """Whether the hosts still running a node script answer; NODE_LOST_EXIT when one does
        not."""
        def alive(i: int, rank: int) -> bool:
            host = self.hosts[rank]
            try:
                return bool(run_on(host, self.profile, f"kill -0 -- -{self.pgids[rank]}",
                                   timeout=self.profile.connect_timeout).ok)
            except Exception as exc:  # noqa: BLE001 - any failure to reach the host is the answer
                self.lost = f"host {where(host)} (node {rank}) stopped answering: {exc}"
                self.lost_ranks.add(rank)
                return False
        answers = on_every_host(ranks, alive)
        if self.lost is not None:
            log.info(f"fsdp-orch supervisor: {self.lost}")
            return NODE_LOST_EXIT
        if not all(answers):  # a node script ended without writing its status
            return None if self._any_exit_written(ranks) else NODE_LOST_EXIT
        return None

    def lost_node(self) -> str | None:
        self._check_hosts(list(self.pgids))
        return self.lost

    def _any_exit_written(self, ranks: list[int]) -> bool:
        return any(Path(exit_file(str(self.attempt_dir), r)).exists() for r in ranks)

    def stop(self, grace: float) -> None:
        job_id = self.submission.job_id
        python = fsdp_orch_python(self.profile, job_id, self.submission.base_plan.bootstrap_dir)
        on_every_host(list(self.pgids), lambda i, rank: stop_on_host(
            self.hosts[rank], self.profile, job_id, self.attempt, self.pgids[rank], grace,
            python=python,
            logs_of=(str(self.attempt_dir), rank) if self.LOGS_ON_NODE else None))
